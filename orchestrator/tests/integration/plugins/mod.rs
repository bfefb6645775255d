//! Plugins as a user meets them: real plugin folders (bundled, user, project), `troupe plugins`
//! editing a real troupe.yaml, bash and python hook scripts run around the calls of
//! `troupe chat` against the mock model server over real HTTP, a plugin's MCP server found with
//! `tool_search` and called through `tool_call`, slash commands from the chat and the HTTP API,
//! and the bundled disk-cleanup plugin end to end.

mod board_hooks;
mod discovery;
mod disk_cleanup;
mod hooks;
mod slash_http;
mod toolsets;
