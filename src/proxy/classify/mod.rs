//! Classification of intercepted requests (placeholder; filled by the classification work).
