//! ComfyUI's websocket messages, decoded (`server.py`; sequences as recorded in `fixtures/captures/runs/*.ws.json`).

use serde_json::Value;

/// One decoded text frame.
#[derive(Debug, Clone, PartialEq)]
pub enum WsEvent {
    Status {
        queue_remaining: Option<u64>,
    },
    ExecutionStart {
        prompt_id: String,
    },
    ExecutionCached {
        prompt_id: String,
        nodes: Vec<String>,
    },
    /// `node: None` is the end of a prompt: history is ready.
    Executing {
        prompt_id: Option<String>,
        node: Option<String>,
    },
    Progress {
        prompt_id: Option<String>,
        node: Option<String>,
        value: f64,
        max: f64,
    },
    ProgressState {
        prompt_id: Option<String>,
    },
    Executed {
        prompt_id: Option<String>,
        node: Option<String>,
    },
    ExecutionSuccess {
        prompt_id: String,
    },
    ExecutionError {
        prompt_id: String,
        node_id: Option<String>,
        node_type: Option<String>,
        exception_type: String,
        exception_message: String,
    },
    ExecutionInterrupted {
        prompt_id: String,
        node_id: Option<String>,
    },
    /// A type this tool does not use (`feature_flags`, custom nodes' messages).
    Other {
        kind: String,
    },
}

fn s(v: &Value, key: &str) -> Option<String> {
    match v.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn f(v: &Value, key: &str) -> f64 {
    v.get(key).and_then(Value::as_f64).unwrap_or(0.0)
}

/// Decodes a text frame; `None` when it is not ComfyUI's `{"type", "data"}` shape.
pub fn decode(text: &str) -> Option<WsEvent> {
    let v: Value = serde_json::from_str(text).ok()?;
    let kind = v.get("type")?.as_str()?.to_string();
    let empty = Value::Null;
    let d = v.get("data").unwrap_or(&empty);
    let prompt_id = || s(d, "prompt_id").unwrap_or_default();
    Some(match kind.as_str() {
        "status" => WsEvent::Status {
            queue_remaining: d
                .pointer("/status/exec_info/queue_remaining")
                .and_then(Value::as_u64),
        },
        "execution_start" => WsEvent::ExecutionStart {
            prompt_id: prompt_id(),
        },
        "execution_cached" => WsEvent::ExecutionCached {
            prompt_id: prompt_id(),
            nodes: d
                .get("nodes")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|n| n.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
        },
        "executing" => WsEvent::Executing {
            prompt_id: s(d, "prompt_id"),
            node: s(d, "node"),
        },
        "progress" => WsEvent::Progress {
            prompt_id: s(d, "prompt_id"),
            node: s(d, "node"),
            value: f(d, "value"),
            max: f(d, "max"),
        },
        "progress_state" => WsEvent::ProgressState {
            prompt_id: s(d, "prompt_id"),
        },
        "executed" => WsEvent::Executed {
            prompt_id: s(d, "prompt_id"),
            node: s(d, "node"),
        },
        "execution_success" => WsEvent::ExecutionSuccess {
            prompt_id: prompt_id(),
        },
        "execution_error" => WsEvent::ExecutionError {
            prompt_id: prompt_id(),
            node_id: s(d, "node_id"),
            node_type: s(d, "node_type"),
            exception_type: s(d, "exception_type").unwrap_or_default(),
            exception_message: s(d, "exception_message").unwrap_or_default(),
        },
        "execution_interrupted" => WsEvent::ExecutionInterrupted {
            prompt_id: prompt_id(),
            node_id: s(d, "node_id"),
        },
        _ => WsEvent::Other { kind },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(raw: &str) -> Vec<WsEvent> {
        let frames: Vec<Value> = serde_json::from_str(raw).unwrap();
        frames
            .iter()
            .map(|f| decode(&f.to_string()).expect("a ComfyUI frame"))
            .collect()
    }

    #[test]
    fn recorded_success_sequence() {
        let events = recorded(include_str!(
            "../../fixtures/captures/runs/ok_empty_invert_save.ws.json"
        ));
        assert_eq!(events.len(), 18);
        assert_eq!(
            events[0],
            WsEvent::Status {
                queue_remaining: Some(0)
            }
        );
        assert!(matches!(events[3], WsEvent::ExecutionStart { .. }));
        assert!(matches!(events[15], WsEvent::ExecutionSuccess { .. }));
        assert!(matches!(events[17], WsEvent::Executing { node: None, .. }));
    }

    #[test]
    fn recorded_error_payload() {
        let events = recorded(include_str!(
            "../../fixtures/captures/runs/exec_error_cpu_oom.ws.json"
        ));
        let err = events
            .iter()
            .find_map(|e| match e {
                WsEvent::ExecutionError {
                    exception_type,
                    exception_message,
                    node_type,
                    ..
                } => Some((
                    exception_type.clone(),
                    exception_message.clone(),
                    node_type.clone(),
                )),
                _ => None,
            })
            .unwrap();
        assert_eq!(err.0, "RuntimeError");
        assert!(err.1.contains("DefaultCPUAllocator: can't allocate memory"));
        assert_eq!(err.2.as_deref(), Some("EmptyImage"));
    }

    #[test]
    fn recorded_interrupt() {
        let raw: Value = serde_json::from_str(include_str!(
            "../../fixtures/captures/runs/interrupt_and_queue.json"
        ))
        .unwrap();
        let events: Vec<WsEvent> = raw["ws"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|f| decode(&f.to_string()))
            .collect();
        assert!(events.iter().any(
            |e| matches!(e, WsEvent::ExecutionInterrupted { node_id: Some(n), .. } if n == "3")
        ));
    }

    #[test]
    fn junk_is_not_an_event() {
        assert_eq!(decode("not json"), None);
        assert_eq!(decode("{\"data\": {}}"), None);
        assert_eq!(
            decode("{\"type\": \"crystools.monitor\", \"data\": {}}"),
            Some(WsEvent::Other {
                kind: "crystools.monitor".into()
            })
        );
    }
}
