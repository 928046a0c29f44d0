//! TLS for the forward proxy: the local CA (`certs/`), leaf certificates minted per host with a
//! bounded cache, and the upstream client configuration (system roots + `--upstream-ca`).
