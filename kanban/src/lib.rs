//! kanban (being written).
