//! Background tasks owned by the value that started them.

use tokio::task::JoinHandle;

/// Aborts its task when dropped, so that a proxy or a checker never
/// outlives its owner.
#[derive(Debug)]
pub struct AbortOnDrop<T>(pub JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
