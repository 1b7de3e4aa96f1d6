//! Helpers for the sampler tests: fake GPU libraries built once and copied per test, a tiny
//! HTTP server standing in for ComfyUI's `/system_stats`, waiting on a condition.

use super::gpu::FakeGpu;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A fresh folder holding the fake libraries (compiled once per test binary, then copied:
/// each test gets its own state file next to its own copy).
pub fn fake_gpu() -> FakeGpu {
    static BUILT: OnceLock<FakeGpu> = OnceLock::new();
    let built = BUILT.get_or_init(FakeGpu::build);
    let dir = tempfile::tempdir().expect("temp dir");
    for name in ["libnvidia-ml.so.1", "libcuda.so", "libcuda.so.1"] {
        std::fs::copy(built.path().join(name), dir.path().join(name)).unwrap();
    }
    FakeGpu { dir }
}

/// Polls `f` every few ms until it holds or `timeout` passes; returns whether it held.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Answers every request with `200` and the current body (`application/json`); counts them.
pub struct HttpStub {
    pub url: String,
    pub body: Arc<Mutex<String>>,
    pub hits: Arc<Mutex<u32>>,
}

impl HttpStub {
    pub fn start(body: &str) -> HttpStub {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let body = Arc::new(Mutex::new(body.to_string()));
        let hits = Arc::new(Mutex::new(0));
        let (b, h) = (Arc::clone(&body), Arc::clone(&hits));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                // Read the request head.
                loop {
                    line.clear();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                }
                *h.lock().unwrap() += 1;
                let text = b.lock().unwrap().clone();
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{text}",
                    text.len()
                );
            }
        });
        HttpStub { url, body, hits }
    }

    pub fn hits(&self) -> u32 {
        *self.hits.lock().unwrap()
    }
}

/// A `/system_stats` body with one CUDA device, in bytes.
pub fn system_stats(vram_total: u64, vram_free: u64, torch_total: u64, torch_free: u64) -> String {
    serde_json::json!({
        "system": { "os": "linux", "ram_total": 1, "ram_free": 1, "comfyui_version": "0.38.1" },
        "devices": [{
            "name": "cuda:0 NVIDIA GeForce RTX 4090 : cudaMallocAsync",
            "type": "cuda", "index": 0,
            "vram_total": vram_total, "vram_free": vram_free,
            "torch_vram_total": torch_total, "torch_vram_free": torch_free
        }]
    })
    .to_string()
}

/// A port nobody listens on (bound, then released).
pub fn closed_port_url() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    drop(l);
    url
}

/// Resident memory of `pid` in bytes, from `/proc/PID/status`.
pub fn rss_of(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .unwrap_or(0)
}

/// The path of a file in a fresh temp dir (kept alive by the returned dir).
pub fn temp_file(name: &str) -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join(name);
    (d, p)
}
