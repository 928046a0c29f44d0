//! The value checks of [`Config`] that serde cannot express; each error names its field.

use super::{Config, ConfigError};

impl Config {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.max_body_bytes < 1024 {
            return Err(ConfigError::new("max_body_bytes", "must be at least 1024"));
        }
        if self.replay_protection && self.replay_window_seconds == 0 {
            return Err(ConfigError::new(
                "replay_window_seconds",
                "must be positive while replay_protection is on",
            ));
        }
        if self.proxy_max_header_bytes < 8192 {
            return Err(ConfigError::new(
                "proxy_max_header_bytes",
                "must be at least 8192",
            ));
        }
        if self.proxy_max_body_bytes < 1024 {
            return Err(ConfigError::new(
                "proxy_max_body_bytes",
                "must be at least 1024",
            ));
        }
        for (field, v) in [
            (
                "proxy_idle_timeout_seconds",
                self.proxy_idle_timeout_seconds,
            ),
            (
                "proxy_request_timeout_seconds",
                self.proxy_request_timeout_seconds,
            ),
            ("max_held_requests", self.max_held_requests as u64),
        ] {
            if v == 0 {
                return Err(ConfigError::new(field, "must be positive"));
            }
        }
        self.validate_link()?;
        if self.max_pending_holds == 0 {
            return Err(ConfigError::new("max_pending_holds", "must be positive"));
        }
        if let Some(url) = &self.dashboard_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(ConfigError::new(
                    "dashboard_url",
                    format!("`{url}` is not an http(s) URL"),
                ));
            }
        }
        Ok(())
    }

    fn validate_link(&self) -> Result<(), ConfigError> {
        for (field, v) in [
            ("checkin_interval_seconds", self.checkin_interval_seconds),
            ("sync_interval_seconds", self.sync_interval_seconds),
            ("ship_batch_size", self.ship_batch_size as u64),
            ("stale_after_seconds", self.stale_after_seconds),
        ] {
            if v == 0 {
                return Err(ConfigError::new(field, "must be positive"));
            }
        }
        let Some(url) = &self.control_plane_url else {
            return Ok(());
        };
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(ConfigError::new(
                "control_plane",
                format!("`{url}` is not an http(s) URL"),
            ));
        }
        let missing = |field: &str, what: &str| {
            ConfigError::new(field, format!("required with --control-plane: {what}"))
        };
        if self.tenant_id.as_deref().is_none_or(str::is_empty) {
            return Err(missing(
                "tenant",
                "the tenant this sidecar belongs to (--tenant)",
            ));
        }
        if self.endpoint_id.as_deref().is_none_or(str::is_empty) {
            return Err(missing(
                "endpoint_id",
                "this host's endpoint id (--endpoint-id)",
            ));
        }
        if self.control_plane_token.is_none() {
            return Err(missing(
                "control_plane_token",
                "an organization API key with read and write in TOOLGATE_CONTROL_PLANE_TOKEN",
            ));
        }
        Ok(())
    }
}
