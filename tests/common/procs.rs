//! The real `toolgate` binary as a child process: started with every listener on port 0, its
//! ready file read, its stderr lines available to wait on (event-driven synchronisation).
#![allow(dead_code)]

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_toolgate");

/// A running `toolgate up`; its stderr is read until the ready line, then drained in a thread.
pub struct Proc {
    /// The process.
    pub child: Child,
    /// The ready file's JSON.
    pub ready: Value,
    /// stderr lines after the ready line.
    pub log: std::sync::mpsc::Receiver<String>,
}

impl Proc {
    pub fn up(dir: &Path, pack: &Path, env: &[(&str, &str)]) -> Proc {
        Self::start("up", dir, pack, env)
    }

    /// Starts `role` (`up`, `serve`, `control-plane`) with every listener on port 0.
    pub fn start(role: &str, dir: &Path, pack: &Path, env: &[(&str, &str)]) -> Proc {
        Self::start_with(role, dir, pack, env, &[])
    }

    /// [`Proc::start`] with extra command-line arguments.
    pub fn start_with(
        role: &str,
        dir: &Path,
        pack: &Path,
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Proc {
        let ready_file = dir.join("ready.json");
        let _ = std::fs::remove_file(&ready_file);
        let mut cmd = Command::new(BIN);
        cmd.args([
            role,
            "--admin-listen",
            "127.0.0.1:0",
            "--control-plane-listen",
            "127.0.0.1:0",
            "--proxy-listen",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .arg("--policy")
        .arg(pack)
        .arg("--ready-file")
        .arg(&ready_file)
        .arg("--ca-dir")
        .arg(dir.join("certs"))
        .args(args)
        .env_remove("TOOLGATE_ADMIN_TOKEN")
        .stderr(Stdio::piped())
        .stdout(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn toolgate");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let (tx, log) = std::sync::mpsc::channel();
        // Lines before the ready line stay available to `wait_for_log` too (background tasks
        // may log before the listeners are announced).
        for line in lines.by_ref() {
            let line = line.unwrap();
            assert!(!line.contains("toolgate: "), "startup failed: {line}");
            let ready = line.contains("toolgate ready");
            let _ = tx.send(line);
            if ready {
                break;
            }
        }
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let ready: Value =
            serde_json::from_str(&std::fs::read_to_string(&ready_file).expect("ready file"))
                .unwrap();
        Proc { child, ready, log }
    }

    pub fn url(&self, key: &str) -> String {
        self.ready[key].as_str().unwrap().to_string()
    }

    /// Blocks until a log line containing `needle` arrives (at most 10 s).
    pub fn wait_for_log(&self, needle: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = self
                .log
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no log line with {needle:?}"));
            if line.contains(needle) {
                return;
            }
        }
    }

    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([name, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    pub fn terminate(mut self) -> i32 {
        self.sigterm_and_wait()
    }

    fn sigterm_and_wait(&mut self) -> i32 {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        self.child
            .wait()
            .unwrap()
            .code()
            .expect("exited, not killed")
    }
}

impl Drop for Proc {
    /// A test that fails before `terminate` must not leave the process running.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
