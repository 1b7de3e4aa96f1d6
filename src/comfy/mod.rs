//! Talking to a running ComfyUI: its HTTP API and its websocket (`server.py`; real answers in `fixtures/captures/http/`).

pub mod events;
pub(crate) mod ws;

use serde_json::{Map, Value, json};
use std::time::Duration;
use ureq::Agent;

/// A ComfyUI server on loopback.
#[derive(Clone)]
pub struct Client {
    base: String,
    agent: Agent,
}

/// The answer to `POST /prompt`.
#[derive(Debug, Clone, PartialEq)]
pub enum Submitted {
    /// Queued: `{prompt_id, number, node_errors}` (node_errors may be non-empty on a 200).
    Queued {
        prompt_id: String,
        node_errors: Value,
    },
    /// 400: ComfyUI refused the prompt; nothing runs and nothing reaches history.
    Rejected { body: Value },
    /// 500 or another status: the request itself was wrong (a tool bug or a wrong format).
    ServerError { status: u16, body: String },
}

/// Why talking to ComfyUI failed.
#[derive(Debug)]
pub struct ApiError(pub String);

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Client {
    /// A client for `http://127.0.0.1:PORT`. It never goes through a proxy: ComfyUI is on this
    /// machine's loopback, and a proxy from the environment (`HTTP_PROXY`, `HTTPS_PROXY`,
    /// `ALL_PROXY`, common on corporate networks) would answer for it, or not at all.
    pub fn new(host: &str, port: u16) -> Client {
        let agent: Agent = Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .proxy(None)
            .build()
            .into();
        Client {
            base: format!("http://{host}:{port}"),
            agent,
        }
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    fn get_json(&self, path: &str, timeout: Duration) -> Result<Value, ApiError> {
        let url = format!("{}{path}", self.base);
        let mut resp = self
            .agent
            .get(&url)
            .config()
            .timeout_global(Some(timeout))
            .build()
            .call()
            .map_err(|e| ApiError(format!("GET {path}: {e}")))?;
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .read_to_string()
            .map_err(|e| ApiError(format!("GET {path}: {e}")))?;
        if status != 200 {
            return Err(ApiError(format!("GET {path}: HTTP {status}")));
        }
        serde_json::from_str(&text).map_err(|e| ApiError(format!("GET {path}: bad JSON: {e}")))
    }

    fn post(&self, path: &str, body: &Value) -> Result<(u16, String), ApiError> {
        let url = format!("{}{path}", self.base);
        let mut resp = self
            .agent
            .post(&url)
            .send_json(body)
            .map_err(|e| ApiError(format!("POST {path}: {e}")))?;
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .read_to_string()
            .map_err(|e| ApiError(format!("POST {path}: {e}")))?;
        Ok((status, text))
    }

    /// `GET /system_stats`, with a short timeout (used to poll readiness).
    pub fn system_stats(&self, timeout: Duration) -> Result<Value, ApiError> {
        self.get_json("/system_stats", timeout)
    }

    /// `GET /history/{id}`: `{}` while pending, the entry once done.
    pub fn history(&self, prompt_id: &str) -> Result<Value, ApiError> {
        self.get_json(&format!("/history/{prompt_id}"), Duration::from_secs(30))
    }

    /// `GET /object_info`: every node class the server has (megabytes with many custom nodes).
    pub fn object_info(&self) -> Result<Value, ApiError> {
        let url = format!("{}/object_info", self.base);
        let mut resp = self
            .agent
            .get(&url)
            .config()
            .timeout_global(Some(Duration::from_secs(120)))
            .build()
            .call()
            .map_err(|e| ApiError(format!("GET /object_info: {e}")))?;
        let text = resp
            .body_mut()
            .with_config()
            .limit(512 << 20)
            .read_to_string()
            .map_err(|e| ApiError(format!("GET /object_info: {e}")))?;
        serde_json::from_str(&text)
            .map_err(|e| ApiError(format!("GET /object_info: bad JSON: {e}")))
    }

    /// `GET /queue`.
    pub fn queue(&self) -> Result<Value, ApiError> {
        self.get_json("/queue", Duration::from_secs(10))
    }

    /// `POST /prompt` with our `client_id` (the websocket's), so events are routed to us.
    pub fn submit(
        &self,
        prompt: &Map<String, Value>,
        client_id: &str,
    ) -> Result<Submitted, ApiError> {
        let body = json!({ "prompt": prompt, "client_id": client_id });
        let (status, text) = self.post("/prompt", &body)?;
        let parsed: Option<Value> = serde_json::from_str(&text).ok();
        Ok(match (status, parsed) {
            (200, Some(v)) => match v.get("prompt_id").and_then(Value::as_str) {
                Some(id) => Submitted::Queued {
                    prompt_id: id.to_string(),
                    node_errors: v.get("node_errors").cloned().unwrap_or(Value::Null),
                },
                None => Submitted::ServerError { status, body: text },
            },
            (400, Some(body)) => Submitted::Rejected { body },
            (status, _) => Submitted::ServerError { status, body: text },
        })
    }

    /// `POST /interrupt` (global).
    pub fn interrupt(&self) -> Result<(), ApiError> {
        self.post("/interrupt", &json!({})).map(|_| ())
    }

    /// `POST /free`: ask ComfyUI to unload models and empty its cache (applied asynchronously).
    pub fn free(&self) -> Result<(), ApiError> {
        self.post(
            "/free",
            &json!({"unload_models": true, "free_memory": true}),
        )
        .map(|_| ())
    }
}

/// A 400 body from `POST /prompt` as lines a person can read.
pub fn rejection_lines(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(err) = body.get("error") {
        let ty = err.get("type").and_then(Value::as_str).unwrap_or("error");
        let msg = err.get("message").and_then(Value::as_str).unwrap_or("");
        let details = err.get("details").and_then(Value::as_str).unwrap_or("");
        let mut line = format!("{ty}: {msg}");
        if !details.is_empty() && details != msg {
            line.push_str(&format!(" ({details})"));
        }
        out.push(line);
    }
    if let Some(nodes) = body.get("node_errors").and_then(Value::as_object) {
        for (id, node) in nodes {
            let class = node
                .get("class_type")
                .and_then(Value::as_str)
                .unwrap_or("?");
            for e in node
                .get("errors")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let msg = e.get("message").and_then(Value::as_str).unwrap_or("");
                let details = e.get("details").and_then(Value::as_str).unwrap_or("");
                out.push(format!("node {id} ({class}): {msg}: {details}"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejection_bodies_read_well() {
        let raw =
            include_str!("../../fixtures/captures/errors/400_bad_missing_checkpoint.post.json");
        let wrapper: Value = serde_json::from_str(raw).unwrap();
        let lines = rejection_lines(&wrapper["body_json"]);
        assert_eq!(
            lines[0],
            "prompt_outputs_failed_validation: Prompt outputs failed validation"
        );
        assert_eq!(
            lines[1],
            "node 4 (CheckpointLoaderSimple): Value not in list: ckpt_name: 'missing.safetensors' not in []"
        );
        let raw = include_str!("../../fixtures/captures/errors/400_bad_unknown_node.post.json");
        let wrapper: Value = serde_json::from_str(raw).unwrap();
        assert_eq!(
            rejection_lines(&wrapper["body_json"]),
            [
                "invalid_prompt: Cannot execute because node NoSuchNodeClass does not exist. (Node ID '#2')"
            ]
        );
    }
}

/// How a prompt ended according to its `/history/{id}` entry (`None` while it has not).
/// Used when the websocket is lost: history tells the same story, later.
pub fn end_from_history(history: &Value, prompt_id: &str) -> Option<crate::classify::PromptEnd> {
    use crate::classify::PromptEnd;
    let status = history.get(prompt_id)?.get("status")?;
    let messages = status.get("messages").and_then(Value::as_array);
    let find = |kind: &str| {
        messages?
            .iter()
            .find(|m| m.get(0).and_then(Value::as_str) == Some(kind))
            .and_then(|m| m.get(1))
    };
    if let Some(e) = find("execution_error") {
        let s = |k: &str| e.get(k).and_then(Value::as_str).map(str::to_string);
        return Some(PromptEnd::Error {
            node_id: s("node_id"),
            node_type: s("node_type"),
            exception_type: s("exception_type").unwrap_or_default(),
            exception_message: s("exception_message").unwrap_or_default(),
        });
    }
    if let Some(i) = find("execution_interrupted") {
        return Some(PromptEnd::Interrupted {
            node_id: i.get("node_id").and_then(Value::as_str).map(str::to_string),
        });
    }
    match status.get("status_str").and_then(Value::as_str) {
        Some("success") => Some(PromptEnd::Success),
        _ => None,
    }
}

#[cfg(test)]
mod history_tests {
    use super::*;
    use crate::classify::PromptEnd;

    fn recorded(raw: &str) -> (Value, String) {
        let wrapper: Value = serde_json::from_str(raw).unwrap();
        let body = wrapper["body"].clone();
        let id = body.as_object().unwrap().keys().next().unwrap().clone();
        (body, id)
    }

    #[test]
    fn recorded_histories() {
        let (h, id) = recorded(include_str!(
            "../../fixtures/captures/runs/ok_empty_invert_save.history.json"
        ));
        assert_eq!(end_from_history(&h, &id), Some(PromptEnd::Success));
        let (h, id) = recorded(include_str!(
            "../../fixtures/captures/runs/exec_error_cpu_oom.history.json"
        ));
        match end_from_history(&h, &id) {
            Some(PromptEnd::Error { exception_type, .. }) => {
                assert_eq!(exception_type, "RuntimeError")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            end_from_history(&serde_json::json!({}), &id),
            None,
            "pending"
        );
    }
}
