//! The HTTP API end to end, over real HTTP on 127.0.0.1:0: sessions driven over HTTP with their
//! approvals answered over HTTP and their events read over SSE, the token on every route, JSON
//! errors for bad input, the board routes, the WebSocket feed resuming from a cursor,
//! `/openapi.json` against the routes really served, and the `troupe serve` binary running its
//! own dispatcher.

mod boards;
mod dispatch;
mod errors;
mod events;
mod feed;
mod routes;
mod server;
mod sessions;
