//! The monolock server.
