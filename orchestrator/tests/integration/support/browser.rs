//! A small DevTools-protocol client over Debian's Chromium, for the dashboard tests: starts a
//! headless browser in its own process group with a fresh profile, attaches to one page and
//! offers navigate, evaluate (awaiting promises), key presses, screenshots, and the list of
//! every request the page sent. Dropping it kills the browser's whole process group.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;

/// The variable that turns a missing browser from a skip into a failure (set by
/// scripts/test.sh).
pub(crate) const REQUIRE_VAR: &str = "TROUPE_REQUIRE_BROWSER";

/// Where Chromium is: `TROUPE_CHROMIUM`, else Debian's paths.
pub(crate) fn chromium_path() -> Option<PathBuf> {
    if let Ok(path) = std::env::var("TROUPE_CHROMIUM")
        && !path.trim().is_empty()
    {
        return Some(PathBuf::from(path.trim())).filter(|p| p.exists());
    }
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// Whether a browser test can run: true when Chromium is there. Without it the test is
/// skipped with a note, or fails when [`REQUIRE_VAR`] is set.
pub(crate) fn browser_available(test: &str) -> bool {
    if chromium_path().is_some() {
        return true;
    }
    let message = format!(
        "{test}: Chromium is not installed (apt-get install chromium, or run \
         scripts/install-test-deps.sh as root; TROUPE_CHROMIUM names another binary)"
    );
    if std::env::var_os(REQUIRE_VAR).is_some() {
        panic!("{message}; {REQUIRE_VAR} is set, so this is a failure");
    }
    eprintln!("skipping {message}");
    false
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>;

/// A headless Chromium with one page attached.
pub(crate) struct Browser {
    child: tokio::process::Child,
    _profile: tempfile::TempDir,
    out: mpsc::UnboundedSender<Message>,
    pending: Pending,
    next_id: Mutex<u64>,
    session: String,
    requests: Arc<Mutex<Vec<String>>>,
    console: Arc<Mutex<Vec<String>>>,
}

impl Browser {
    /// Starts Chromium and opens a blank page, with network events recorded.
    pub(crate) async fn launch() -> Result<Browser, String> {
        let path = chromium_path().ok_or("Chromium is not installed")?;
        let profile = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mut command = tokio::process::Command::new(&path);
        command
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                "--window-size=1400,900",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            // Its own group, so the renderer and GPU helpers die with it.
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", path.display()))?;
        let stderr = child.stderr.take().ok_or("Chromium has no stderr")?;
        let mut lines = BufReader::new(stderr).lines();
        let mut seen = Vec::new();
        let ws_url = tokio::time::timeout(Duration::from_secs(60), async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(url) = line.trim().strip_prefix("DevTools listening on ") {
                    return Ok(url.trim().to_string());
                }
                seen.push(line);
            }
            Err(format!("Chromium exited before listening: {seen:?}"))
        })
        .await
        .map_err(|_| "Chromium did not open its DevTools port within 60 s".to_string())??;
        // Keep draining stderr so Chromium never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

        let (socket, _) = tokio_tungstenite::connect_async(ws_url.as_str())
            .await
            .map_err(|e| format!("cannot connect to {ws_url}: {e}"))?;
        let (mut sink, mut stream) = socket.split();
        let (out, mut out_rx) = mpsc::unbounded_channel::<Message>();
        tokio::spawn(async move {
            while let Some(message) = out_rx.recv().await {
                if sink.send(message).await.is_err() {
                    return;
                }
            }
        });
        let pending: Pending = Arc::default();
        let requests: Arc<Mutex<Vec<String>>> = Arc::default();
        let console: Arc<Mutex<Vec<String>>> = Arc::default();
        {
            let (pending, requests, console) = (pending.clone(), requests.clone(), console.clone());
            tokio::spawn(async move {
                while let Some(Ok(message)) = stream.next().await {
                    let Message::Text(text) = message else {
                        continue;
                    };
                    let Ok(value) = serde_json::from_str::<Value>(text.as_str()) else {
                        continue;
                    };
                    if let Some(id) = value["id"].as_u64() {
                        if let Some(tx) = pending.lock().unwrap().remove(&id) {
                            let _ = tx.send(value);
                        }
                        continue;
                    }
                    match value["method"].as_str() {
                        Some("Network.requestWillBeSent") => {
                            if let Some(url) = value["params"]["request"]["url"].as_str() {
                                requests.lock().unwrap().push(url.to_string());
                            }
                        }
                        Some("Network.webSocketCreated") => {
                            if let Some(url) = value["params"]["url"].as_str() {
                                requests.lock().unwrap().push(url.to_string());
                            }
                        }
                        Some("Runtime.consoleAPICalled")
                        | Some("Runtime.exceptionThrown")
                        | Some("Log.entryAdded") => {
                            console.lock().unwrap().push(value["params"].to_string());
                        }
                        _ => {}
                    }
                }
            });
        }
        let mut browser = Browser {
            child,
            _profile: profile,
            out,
            pending,
            next_id: Mutex::new(0),
            session: String::new(),
            requests,
            console,
        };
        let target = browser
            .browser_call("Target.createTarget", json!({"url": "about:blank"}))
            .await?;
        let target_id = target["targetId"]
            .as_str()
            .ok_or("no targetId")?
            .to_string();
        let attached = browser
            .browser_call(
                "Target.attachToTarget",
                json!({"targetId": target_id, "flatten": true}),
            )
            .await?;
        browser.session = attached["sessionId"]
            .as_str()
            .ok_or("no sessionId")?
            .to_string();
        for domain in [
            "Page.enable",
            "Network.enable",
            "Runtime.enable",
            "Log.enable",
        ] {
            browser.call(domain, json!({})).await?;
        }
        Ok(browser)
    }

    async fn send(
        &self,
        method: &str,
        params: Value,
        session: Option<&str>,
    ) -> Result<Value, String> {
        let id = {
            let mut next = self.next_id.lock().unwrap();
            *next += 1;
            *next
        };
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap().insert(id, tx);
        self.out
            .send(Message::Text(message.to_string().into()))
            .map_err(|_| "the DevTools connection is closed".to_string())?;
        let reply = tokio::time::timeout(Duration::from_secs(60), rx)
            .await
            .map_err(|_| format!("{method}: no answer within 60 s"))?
            .map_err(|_| format!("{method}: the DevTools connection closed"))?;
        if let Some(error) = reply.get("error") {
            return Err(format!("{method}: {error}"));
        }
        Ok(reply["result"].clone())
    }

    async fn browser_call(&self, method: &str, params: Value) -> Result<Value, String> {
        self.send(method, params, None).await
    }

    /// A DevTools command on the page.
    pub(crate) async fn call(&self, method: &str, params: Value) -> Result<Value, String> {
        self.send(method, params, Some(&self.session)).await
    }

    /// Opens `url` and waits until its document has loaded.
    pub(crate) async fn navigate(&self, url: &str) -> Result<(), String> {
        self.call("Page.navigate", json!({"url": url})).await?;
        self.wait_for(
            "document.readyState === 'complete'",
            Duration::from_secs(30),
        )
        .await
        .map(|_| ())
    }

    /// Evaluates `expression` in the page (awaiting a promise), returning its value as JSON.
    pub(crate) async fn eval(&self, expression: &str) -> Result<Value, String> {
        let result = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expression, "awaitPromise": true, "returnByValue": true}),
            )
            .await?;
        if let Some(exception) = result.get("exceptionDetails") {
            return Err(format!("{expression}: {exception}"));
        }
        Ok(result["result"]["value"].clone())
    }

    /// Polls `expression` until it is truthy, returning its value; fails after `within`, with
    /// the last value seen and the page's console.
    pub(crate) async fn wait_for(
        &self,
        expression: &str,
        within: Duration,
    ) -> Result<Value, String> {
        let deadline = Instant::now() + within;
        loop {
            let value = self.eval(expression).await;
            if let Ok(v) = &value
                && !matches!(v, Value::Null | Value::Bool(false))
                && v != &json!(0)
                && v != &json!("")
            {
                return value;
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "waited {within:?} for `{expression}`; last {value:?}; console: {:?}",
                    self.console()
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Fills the dashboard's sign-in form with `token` and sends it. The form must be showing
    /// or about to be; whether the token is taken is for the caller to check.
    pub(crate) async fn sign_in(&self, token: &str) -> Result<(), String> {
        self.wait_for(
            "!document.getElementById('signin').hidden",
            Duration::from_secs(90),
        )
        .await?;
        self.click("#signin-token").await?;
        self.type_text(token).await?;
        self.press("Enter").await
    }

    /// Types `text` into the focused element.
    pub(crate) async fn type_text(&self, text: &str) -> Result<(), String> {
        self.call("Input.insertText", json!({"text": text}))
            .await
            .map(|_| ())
    }

    /// Presses and releases one key (`"/"`, `"n"`, `"Escape"`, `"Enter"`).
    pub(crate) async fn press(&self, key: &str) -> Result<(), String> {
        let (code, text, vk) = match key {
            "Escape" => ("Escape", "", 27),
            "Enter" => ("Enter", "\r", 13),
            "/" => ("Slash", "/", 191),
            other => {
                let c = other.chars().next().unwrap_or(' ');
                (other, other, c.to_ascii_uppercase() as i64)
            }
        };
        let mut down =
            json!({"type": "keyDown", "key": key, "code": code, "windowsVirtualKeyCode": vk});
        if !text.is_empty() {
            down["text"] = json!(text);
        }
        self.call("Input.dispatchKeyEvent", down).await?;
        self.call(
            "Input.dispatchKeyEvent",
            json!({"type": "keyUp", "key": key, "code": code, "windowsVirtualKeyCode": vk}),
        )
        .await
        .map(|_| ())
    }

    /// Clicks the first element matching `selector`, at its centre, as a person would: waits
    /// until it is shown and nothing covers it.
    pub(crate) async fn click(&self, selector: &str) -> Result<(), String> {
        let quoted = serde_json::to_string(selector).map_err(|e| e.to_string())?;
        let point = self
            .wait_for(
                &format!(
                    "(() => {{ const e = document.querySelector({quoted}); if (!e) return null; \
                     e.scrollIntoView({{block: 'center'}}); const r = e.getBoundingClientRect(); \
                     if (r.width === 0) return null; const x = r.x + r.width / 2, y = r.y + r.height / 2; \
                     const top = document.elementFromPoint(x, y); \
                     return top && (e === top || e.contains(top)) ? [x, y] : null; }})()"
                ),
                Duration::from_secs(10),
            )
            .await?;
        let (x, y) = (point[0].clone(), point[1].clone());
        for kind in ["mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
            )
            .await?;
        }
        Ok(())
    }

    /// Writes a PNG of the page to `path`.
    pub(crate) async fn screenshot(&self, path: &Path) -> Result<(), String> {
        let shot = self
            .call("Page.captureScreenshot", json!({"format": "png"}))
            .await?;
        let data = shot["data"].as_str().ok_or("no screenshot data")?;
        let bytes = decode_base64(data)?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        }
        std::fs::write(path, bytes).map_err(|e| e.to_string())
    }

    /// Every URL the page requested (documents, scripts, fetches, WebSockets), in order.
    pub(crate) fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }

    /// What the page logged and threw, and what the browser logged about it (a request the
    /// Content-Security-Policy blocked, say).
    pub(crate) fn console(&self) -> Vec<String> {
        self.console.lock().unwrap().clone()
    }
}

/// Standard base64 (what DevTools sends screenshots in), without a dependency for one use.
fn decode_base64(text: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
    {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return Err(format!("{:?} is not base64", c as char)),
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Ok(out)
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The whole group: the browser, its renderers and helpers.
        if let Some(pid) = self.child.id().and_then(|p| i32::try_from(p).ok()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.child.start_kill();
    }
}

/// Where the browser tests leave their screenshots.
pub(crate) fn screenshots() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard")
}
