//! The proxy's own events, appended to the same hash-chained ledger as POST /v1/events/batch:
//! TOOL_CALL_PRE after a passing check, TOOL_CALL_POST with the (size-capped) result once the
//! response has streamed through, TOOL_CALL_BLOCK on refusal, and LLM_INVOCATION with token
//! usage read from an LLM API's response. A call queues *builders* of its events to the recorder
//! (`recorder.rs`), whose thread builds them ([`event`]) and appends them in batches, off the
//! request path.
//!
//! [`Capture`] wraps a response body: it passes every frame through unchanged (never buffering
//! the stream) and keeps the first `cap` bytes and the last [`TAIL_BYTES`] for the events.

use super::recorder::Recorder;
use super::Proxy;
use crate::ledger::{Event, EventType};
use crate::vocab::EnforcementMode;
use axum::body::{Body, Bytes, HttpBody};
use chrono::{DateTime, Utc};
use hyper::body::Frame;
use serde_json::{Map, Value};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Most names of the session's earlier calls an event carries in `session_tool_calls` (the
/// most recent ones); `metadata.session_tool_calls_len` gives the length of the list the policy
/// saw (the proxy keeps at most 256 per session, `calls.rs`). The
/// policy still sees the proxy's whole history (up to 256 calls); the ledger keeps it too, as
/// the TOOL_CALL_PRE of every forwarded call, so repeating all of it in every event would
/// store a session's history once per call (quadratic growth) for nothing.
pub const EVENT_HISTORY: usize = 16;

/// Bytes kept from the end of a response (where streamed LLM usage arrives).
pub const TAIL_BYTES: usize = 16 * 1024;

/// The fields every event of one call shares.
#[derive(Clone)]
pub struct EventBase {
    /// Tenant.
    pub tenant_id: String,
    /// Session.
    pub session_id: String,
    /// User.
    pub user_id: String,
    /// Agent.
    pub agent_id: String,
    /// Tool (as the policy named it).
    pub tool_name: String,
    /// Approved scope of the call.
    pub approved_scope: Vec<String>,
    /// The last [`EVENT_HISTORY`] calls before this one.
    pub session_tool_calls: Vec<String>,
    /// Mode of the call.
    pub enforcement_mode: EnforcementMode,
    /// host, method, path, decision ids …
    pub metadata: Map<String, Value>,
}

impl EventBase {
    /// From the EnforcementRequest the proxy built for the call; shared by the call's PRE, POST
    /// or BLOCK builders on the recorder thread.
    pub fn of(req: &crate::policy::EnforcementRequest) -> Arc<EventBase> {
        let history = &req.session_tool_calls;
        let recent = &history[history.len().saturating_sub(EVENT_HISTORY)..];
        let mut metadata = req.metadata.clone().unwrap_or_default();
        metadata.insert("session_tool_calls_len".into(), history.len().into());
        Arc::new(EventBase {
            tenant_id: req.tenant_id.clone(),
            session_id: req.session_id.clone(),
            user_id: req.user_id.clone(),
            agent_id: req.agent_id.clone(),
            tool_name: req.tool_name.clone(),
            approved_scope: req.approved_scope.clone(),
            session_tool_calls: recent.to_vec(),
            enforcement_mode: req.enforcement_mode,
            metadata,
        })
    }
}

/// One of the call's events (run by a builder on the recorder thread, `recorder.rs`): the
/// shared fields of `base`, its metadata plus `extra`, a new event id, and `at` (taken on the
/// call's path when the event happened, not when the builder runs) as `occurred_at`.
pub fn event(
    base: &EventBase,
    event_type: EventType,
    content: String,
    extra: Map<String, Value>,
    at: DateTime<Utc>,
) -> Event {
    let mut metadata = base.metadata.clone();
    metadata.extend(extra);
    Event {
        event_id: crate::ids::new_id("evt"),
        tenant_id: base.tenant_id.clone(),
        session_id: base.session_id.clone(),
        user_id: base.user_id.clone(),
        agent_id: Some(base.agent_id.clone()),
        source_type: event_type.source_type(),
        event_type,
        tool_name: Some(base.tool_name.clone()),
        approved_scope: base.approved_scope.clone(),
        session_tool_calls: base.session_tool_calls.clone(),
        enforcement_mode: base.enforcement_mode,
        content,
        occurred_at: crate::ids::rfc3339(at),
        metadata: Some(metadata),
    }
}

/// Queues the builder of one PRE or BLOCK event: on the recorder thread, `args` (as sent, or
/// as refused) become its `content` and `extra()` is added to its metadata; `occurred_at` is
/// now.
pub fn queue_call_event(
    recorder: &Recorder,
    base: &Arc<EventBase>,
    event_type: EventType,
    args: Map<String, Value>,
    extra: impl FnOnce() -> Map<String, Value> + Send + 'static,
) {
    let (base, at) = (base.clone(), crate::ids::now());
    recorder.record_with(move |out| {
        let content = Value::Object(args).to_string();
        out.push(event(&base, event_type, content, extra(), at));
    });
}

/// What a [`Capture`] saw of a response.
pub struct Captured {
    /// The first `cap` bytes.
    pub head: Vec<u8>,
    /// The last [`TAIL_BYTES`] bytes (overlaps `head` for short bodies).
    pub tail: Vec<u8>,
    /// Total bytes streamed.
    pub total: usize,
    /// True when the stream ended normally (false: the client went away or the upstream failed).
    pub complete: bool,
}

impl Captured {
    /// The head as text, marked when truncated.
    pub fn head_text(&self) -> String {
        let mut t = String::from_utf8_lossy(&self.head).into_owned();
        if self.total > self.head.len() {
            t.push_str(&format!(
                "…[truncated: {} of {} bytes recorded]",
                self.head.len(),
                self.total
            ));
        }
        t
    }

    /// The whole body when it fit in the head, else the tail (for usage parsing).
    pub fn usage_source(&self) -> &[u8] {
        if self.total == self.head.len() {
            &self.head
        } else {
            &self.tail
        }
    }
}

/// A response body that records what streams through it and reports once at the end.
pub struct Capture {
    inner: Body,
    cap: usize,
    seen: Captured,
    done: Option<Box<dyn FnOnce(Captured) + Send>>,
}

impl Capture {
    /// Wraps `inner`; `done` runs once, at the end of the stream or when the body is dropped.
    pub fn wrap(inner: Body, cap: usize, done: impl FnOnce(Captured) + Send + 'static) -> Body {
        Body::new(Capture {
            inner,
            cap,
            seen: Captured {
                head: Vec::new(),
                tail: Vec::new(),
                total: 0,
                complete: false,
            },
            done: Some(Box::new(done)),
        })
    }

    fn keep(&mut self, data: &Bytes) {
        self.seen.total += data.len();
        let room = self.cap.saturating_sub(self.seen.head.len());
        self.seen
            .head
            .extend_from_slice(&data[..room.min(data.len())]);
        self.seen.tail.extend_from_slice(data);
        if self.seen.tail.len() > TAIL_BYTES {
            let cut = self.seen.tail.len() - TAIL_BYTES;
            self.seen.tail.drain(..cut);
        }
    }

    fn finish(&mut self, complete: bool) {
        if let Some(done) = self.done.take() {
            self.seen.complete = complete;
            let seen = std::mem::replace(
                &mut self.seen,
                Captured {
                    head: Vec::new(),
                    tail: Vec::new(),
                    total: 0,
                    complete,
                },
            );
            done(seen);
        }
    }
}

impl HttpBody for Capture {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let data = data.clone();
                    self.keep(&data);
                }
            }
            Poll::Ready(Some(Err(_))) => self.finish(false),
            Poll::Ready(None) => self.finish(true),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.finish(false);
    }
}

/// Records TOOL_CALL_POST (and LLM_INVOCATION for LLM calls) when the response has streamed:
/// the capture is handed to the recorder, whose thread builds the events.
pub fn after_response(
    proxy: &Proxy,
    bases: Vec<Arc<EventBase>>,
    status: u16,
    llm_provider: Option<String>,
    body: Body,
) -> Body {
    let recorder = proxy.recorder.clone();
    let cap = proxy
        .core
        .policy
        .current()
        .proxy()
        .max_recorded_result_bytes();
    let cap = if llm_provider.is_some() {
        cap.max(64 * 1024)
    } else {
        cap
    };
    Capture::wrap(body, cap, move |seen| {
        let at = crate::ids::now();
        recorder.record_with(move |out| post_events(out, &bases, status, llm_provider, &seen, at));
    })
}

fn post_events(
    out: &mut Vec<Event>,
    bases: &[Arc<EventBase>],
    status: u16,
    llm_provider: Option<String>,
    seen: &Captured,
    at: DateTime<Utc>,
) {
    let mut extra = Map::new();
    extra.insert("status".into(), status.into());
    extra.insert("result_bytes".into(), seen.total.into());
    extra.insert("complete".into(), seen.complete.into());
    let text = seen.head_text();
    for base in bases {
        out.push(event(
            base,
            EventType::ToolCallPost,
            text.clone(),
            extra.clone(),
            at,
        ));
    }
    if let (Some(provider), Some(base)) = (llm_provider, bases.first()) {
        out.push(llm_event(base, &provider, seen, at));
    }
}

fn llm_event(base: &EventBase, provider: &str, seen: &Captured, at: DateTime<Utc>) -> Event {
    let usage = super::classify::llm_usage(provider, seen.usage_source());
    let mut extra = Map::new();
    extra.insert("provider".into(), provider.into());
    if let Some(u) = &usage {
        extra.insert(
            "model".into(),
            u.model.clone().map(Value::from).unwrap_or(Value::Null),
        );
        extra.insert("input_tokens".into(), u.input_tokens.into());
        extra.insert("output_tokens".into(), u.output_tokens.into());
        extra.insert(
            "total_tokens".into(),
            (u.input_tokens + u.output_tokens).into(),
        );
    }
    extra.insert("usage_reported".into(), usage.is_some().into());
    event(base, EventType::LlmInvocation, String::new(), extra, at)
}
