//! troupe: the programmatic API, config and CLI (being written).

pub use troupe_tools as tools;
