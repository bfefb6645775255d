//! The HTTP API served in-process on 127.0.0.1:0 over a throwaway board store, with a
//! registry whose one tool (`publish`) needs approval, and a client that carries the token.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use troupe::actors::delegate::DelegationConfig;
use troupe::actors::session::SessionConfig;
use troupe::actors::supervisor::ApprovalConfig;
use troupe::http::{FeedWake, HttpState, RunningServer};
use troupe::tools::{Registry, ToolDef, ToolResult};
use troupe::{Troupe, TroupeConfig};
use troupe_kanban::{SqliteStore, Store};

pub(super) const TOKEN: &str = "test-token-0123456789abcdef";

pub(super) fn test_registry() -> Arc<Registry> {
    Registry::with_tools([
        ToolDef::new("publish", "Publish the draft.", json!({"type": "object"}))
            .with_toolset("test")
            .with_fn(|_, _| Box::pin(async { ToolResult::text("published") })),
    ])
}

pub(super) struct Server {
    pub(super) base: String,
    pub(super) client: reqwest::Client,
    pub(super) store: Arc<dyn Store>,
    pub(super) troupe: Troupe,
    server: Option<RunningServer>,
    _dir: tempfile::TempDir,
}

impl Server {
    pub(super) async fn start() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path()).await.unwrap());
        Server::start_with(store, FeedWake::Poll(Duration::from_millis(5)), dir).await
    }

    pub(super) async fn start_with(
        store: Arc<dyn Store>,
        wake: FeedWake,
        dir: tempfile::TempDir,
    ) -> Server {
        let registry = test_registry();
        let approvals = ApprovalConfig {
            require_approval: vec!["publish".into()],
            ..ApprovalConfig::default()
        };
        let troupe = Troupe::start(TroupeConfig::new(registry).with_approvals(approvals)).unwrap();
        Server::start_on(troupe, store, wake, dir).await
    }

    /// A server whose sessions may delegate, set up as `troupe serve` does (background
    /// delegation on).
    pub(super) async fn start_delegating() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path()).await.unwrap());
        let registry = test_registry();
        let mut session = SessionConfig::default();
        troupe::delegation::enable_delegation(
            &registry,
            &mut session,
            DelegationConfig::default(),
            true,
        );
        let troupe = Troupe::start(TroupeConfig::new(registry).with_session(session)).unwrap();
        Server::start_on(troupe, store, FeedWake::Poll(Duration::from_millis(5)), dir).await
    }

    pub(super) async fn start_on(
        troupe: Troupe,
        store: Arc<dyn Store>,
        wake: FeedWake,
        dir: tempfile::TempDir,
    ) -> Server {
        let state = HttpState::new(troupe.clone(), Arc::clone(&store), TOKEN)
            .await
            .unwrap()
            .with_wake(wake);
        let server = troupe::http::serve(state, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        Server {
            base: format!("http://{}", server.local_addr()),
            client: reqwest::Client::new(),
            store,
            troupe,
            server: Some(server),
            _dir: dir,
        }
    }

    pub(super) fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(TOKEN)
    }

    pub(super) async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self.request(method, path);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    pub(super) async fn stop(mut self) {
        if let Some(server) = self.server.take() {
            server.shutdown().await.unwrap();
        }
        self.troupe.close().await;
    }
}

pub(super) fn error_code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("(no error code)")
}
