//! The monolock client.
