//! The forward proxy (DESIGN.md, "proxy/"): accept loop, CONNECT + TLS interception, classification
//! of intercepted requests (MCP, REST routes, LLM calls, host-level), and applying the verdict.
pub mod classify;
