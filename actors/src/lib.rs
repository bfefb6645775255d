//! actors (being written).
