//! Test helpers shared by the ledger's unit tests.

use crate::store::{Store, StoreError};
use std::path::Path;
use std::time::{Duration, Instant};

/// Opens the store in `dir` again after the previous handles were dropped.
///
/// sled 0.34 releases its file lock from a background I/O thread shortly after the last handle
/// is dropped, so an immediate reopen in the same process fails now and then with
/// `could not acquire lock`. This retries that one error until a 10 s deadline; any other
/// error, or the deadline, fails the test.
pub(crate) fn reopen(dir: &Path) -> Store {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match Store::open(dir) {
            Ok(store) => return store,
            Err(StoreError::Open { source, .. })
                if source.to_string().contains("could not acquire lock")
                    && Instant::now() < deadline =>
            {
                std::thread::yield_now()
            }
            Err(e) => panic!("reopen failed: {e}"),
        }
    }
}
