//! A blocking websocket client for ComfyUI's `/ws?clientId=…`, read on its own thread.

use super::events::{self, WsEvent};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc::Sender;
use std::time::Duration;
use tungstenite::{Message, WebSocket};

/// Connects to `ws://HOST:PORT/ws?clientId=ID`. No `Origin` header is sent: ComfyUI answers
/// 403 to a foreign Origin on a loopback Host (ComfyUI's `server.py` origin check).
pub(crate) fn connect(addr: SocketAddr, client_id: &str) -> Result<WebSocket<TcpStream>, String> {
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("websocket connect: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .map_err(|e| e.to_string())?;
    let url = format!("ws://{addr}/ws?clientId={client_id}");
    let (socket, _) = tungstenite::client(url.as_str(), stream)
        .map_err(|e| format!("websocket handshake: {e}"))?;
    Ok(socket)
}

/// What the reader thread reports.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum WsMessage {
    Event(WsEvent),
    /// The socket closed or failed; no more events will come.
    Closed(String),
}

/// Reads frames until the socket closes or `stop` is set, sending decoded events.
/// Binary frames (previews) are skipped.
pub(crate) fn pump<M: From<WsMessage>>(
    mut socket: WebSocket<TcpStream>,
    tx: Sender<M>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    use std::sync::atomic::Ordering;
    loop {
        if stop.load(Ordering::Relaxed) {
            let _ = socket.close(None);
            return;
        }
        match socket.read() {
            Ok(Message::Text(text)) => {
                if let Some(ev) = events::decode(text.as_str())
                    && tx.send(WsMessage::Event(ev).into()).is_err()
                {
                    return;
                }
            }
            Ok(Message::Close(_)) => {
                let _ = tx.send(WsMessage::Closed("closed by ComfyUI".into()).into());
                return;
            }
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => {
                let _ = tx.send(WsMessage::Closed(e.to_string()).into());
                return;
            }
        }
    }
}
