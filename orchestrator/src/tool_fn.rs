//! Tools from plain Rust: an async function or closure over a typed argument struct becomes a
//! [`ToolDef`]. The struct derives `serde::Deserialize` and `schemars::JsonSchema`; its JSON
//! Schema becomes the tool's parameters, and the model's arguments are checked against both
//! the schema (by the view, before any handler runs) and the struct (here) before the function
//! is called. A bad call gets an error result naming what was wrong, never a panic.
//!
//! ```
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//! use troupe::tool_fn::tool_fn;
//!
//! /// The arguments of `word_count`.
//! #[derive(Deserialize, JsonSchema)]
//! struct Text {
//!     /// The text to count.
//!     text: String,
//! }
//!
//! let def = tool_fn("word_count", "Count the words in a text.", |args: Text| async move {
//!     Ok::<_, String>(serde_json::json!({"words": args.text.split_whitespace().count()}))
//! });
//! assert_eq!(def.parameters()["required"][0], "text");
//! ```

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use troupe_tools::{CallContext, ToolDef, ToolHandler, ToolResult};

/// What a typed tool's function may return.
pub trait IntoToolResult {
    /// The result the model sees.
    fn into_tool_result(self) -> ToolResult;
}

impl IntoToolResult for ToolResult {
    fn into_tool_result(self) -> ToolResult {
        self
    }
}

impl IntoToolResult for String {
    fn into_tool_result(self) -> ToolResult {
        ToolResult::text(self)
    }
}

impl<T: Serialize, E: std::fmt::Display> IntoToolResult for Result<T, E> {
    fn into_tool_result(self) -> ToolResult {
        match self {
            Ok(value) => match serde_json::to_value(value) {
                Ok(Value::String(text)) => ToolResult::text(text),
                Ok(value) => ToolResult::json(value),
                Err(e) => ToolResult::error(format!(
                    "The tool's result could not be written as JSON: {e}"
                )),
            },
            Err(e) => ToolResult::error(e.to_string()),
        }
    }
}

/// The JSON Schema of `A` as tool parameters: an object schema without the `$schema` and
/// `title` keys model APIs do not need.
pub fn parameters_of<A: JsonSchema>() -> Value {
    let schema = schemars::schema_for!(A);
    let mut value = serde_json::to_value(&schema).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut value {
        map.remove("$schema");
        map.remove("title");
        map.entry("type")
            .or_insert_with(|| Value::String("object".into()));
        map.entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
    }
    value
}

/// A tool running `f` on typed arguments `A`; see the module doc.
pub fn tool_fn<A, F, Fut, R>(
    name: impl Into<String>,
    description: impl Into<String>,
    f: F,
) -> ToolDef
where
    A: DeserializeOwned + JsonSchema + Send + 'static,
    F: Fn(A) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = R> + Send + 'static,
    R: IntoToolResult + 'static,
{
    tool_fn_with_context(name, description, move |args: A, _ctx: CallContext| f(args))
}

/// [`tool_fn`] whose function also gets the call's context (session id, cancellation).
pub fn tool_fn_with_context<A, F, Fut, R>(
    name: impl Into<String>,
    description: impl Into<String>,
    f: F,
) -> ToolDef
where
    A: DeserializeOwned + JsonSchema + Send + 'static,
    F: Fn(A, CallContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = R> + Send + 'static,
    R: IntoToolResult + 'static,
{
    let name = name.into();
    let handler = Typed {
        name: name.clone(),
        f,
        args: PhantomData::<fn() -> A>,
    };
    ToolDef::new(name, description, parameters_of::<A>()).with_handler(Arc::new(handler))
}

struct Typed<A, F> {
    name: String,
    f: F,
    args: PhantomData<fn() -> A>,
}

impl<A, F, Fut, R> ToolHandler for Typed<A, F>
where
    A: DeserializeOwned + JsonSchema + Send + 'static,
    F: Fn(A, CallContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = R> + Send + 'static,
    R: IntoToolResult + 'static,
{
    fn call(
        &self,
        arguments: Map<String, Value>,
        ctx: CallContext,
    ) -> BoxFuture<'static, ToolResult> {
        let args: A = match serde_json::from_value(Value::Object(arguments)) {
            Ok(args) => args,
            Err(e) => {
                let text = format!(
                    "The arguments of '{}' do not fit its parameters ({e}); call it again with arguments that match its schema.",
                    self.name
                );
                return Box::pin(async move { ToolResult::error(text) });
            }
        };
        let run = (self.f)(args, ctx);
        Box::pin(async move { run.await.into_tool_result() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;
    use troupe_tools::Registry;

    /// Arguments of the test tool.
    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code, reason = "read through serde")]
    struct Add {
        /// First.
        a: i64,
        /// Second.
        b: i64,
    }

    #[tokio::test]
    async fn typed_arguments_are_checked_before_the_function_runs() {
        let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = Arc::clone(&ran);
        let def = tool_fn("add", "Add two numbers.", move |args: Add| {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move { Ok::<_, String>(json!({"sum": args.a + args.b})) }
        });
        let params = def.parameters().clone();
        assert_eq!(params["type"], "object");
        assert_eq!(params["properties"]["a"]["type"], "integer");
        assert!(params.get("$schema").is_none());
        let view = Registry::with_tools([def]).view_all();
        let call = |args: Value| {
            let view = view.clone();
            async move {
                let Value::Object(args) = args else {
                    unreachable!()
                };
                view.call("add", args, CallContext::detached("c")).await
            }
        };
        let ok = call(json!({"a": 2, "b": 3})).await;
        assert!(!ok.is_error, "{}", ok.to_model_text());
        assert!(ok.to_model_text().contains('5'));
        let bad = call(json!({"a": "two", "b": 3})).await;
        assert!(bad.is_error);
        let missing = call(json!({"a": 1})).await;
        assert!(missing.is_error);
        assert_eq!(
            ran.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "only the good call ran"
        );
    }
}
