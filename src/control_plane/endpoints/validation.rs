//! Validation of registration and check-in bodies (the 422 texts).

use super::*;
/// An identifier (endpoint_id, agent id): 1..=[`MAX_ID_CHARS`] characters, no control
/// characters. Errors: the 422 text naming `field`.
pub fn validate_id(field: &str, value: &str) -> Result<(), String> {
    let chars = value.chars().count();
    if chars == 0 || chars > MAX_ID_CHARS {
        return Err(format!("{field} must be 1 to {MAX_ID_CHARS} characters"));
    }
    if value.chars().any(char::is_control) {
        return Err(format!("{field} must not contain control characters"));
    }
    Ok(())
}

fn validate_text(field: &str, value: Option<&str>) -> Result<(), String> {
    let Some(v) = value else { return Ok(()) };
    if v.chars().count() > MAX_TEXT_CHARS {
        return Err(format!(
            "{field} is longer than {MAX_TEXT_CHARS} characters"
        ));
    }
    if v.chars().any(char::is_control) {
        return Err(format!("{field} must not contain control characters"));
    }
    Ok(())
}

fn validate_agents(agents: Option<&[String]>) -> Result<(), String> {
    let Some(agents) = agents else { return Ok(()) };
    if agents.len() > MAX_AGENT_IDS {
        return Err(format!("agent_ids has more than {MAX_AGENT_IDS} entries"));
    }
    for (i, a) in agents.iter().enumerate() {
        validate_id(&format!("agent_ids[{i}]"), a)?;
    }
    Ok(())
}

impl Registration {
    /// Errors: the first problem, naming the field (422).
    pub fn validate(&self) -> Result<(), String> {
        validate_id("endpoint_id", &self.endpoint_id)?;
        for (field, value) in [
            ("hostname", &self.hostname),
            ("employee_email", &self.employee_email),
            ("enrollment", &self.enrollment),
            ("environment", &self.environment),
            ("proxy_version", &self.proxy_version),
        ] {
            validate_text(field, value.as_deref())?;
        }
        validate_agents(self.agent_ids.as_deref())
    }
}

impl CheckIn {
    /// Errors: the first problem, naming the field (422).
    pub fn validate(&self) -> Result<(), String> {
        validate_text("proxy_version", self.proxy_version.as_deref())?;
        validate_agents(self.agent_ids.as_deref())?;
        if let Some(r) = self.risk_score {
            if !(0.0..=100.0).contains(&r) {
                return Err("risk_score must be between 0 and 100".into());
            }
        }
        Ok(())
    }
}
