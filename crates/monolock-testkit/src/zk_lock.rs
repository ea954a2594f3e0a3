//! ZooKeeper's lock recipe as its documentation gives it (and Curator's
//! `InterProcessMutex` makes it), for the bench and the fault suite: an
//! ephemeral sequential node under the lock's node; the lock is ours when
//! no lower node is left, and until then we watch the node just before
//! ours. Behind the `zookeeper` feature, so that only they build the
//! client.

use anyhow::{Context as _, Result, bail};
use zookeeper_client as zk;

/// The node of lock `name`, one level under `root` (a `/` in the name
/// would ask for a deeper node).
pub fn lock_dir(root: &str, name: &str) -> String {
    let flat: String = name
        .chars()
        .map(|c| if c == '/' { '_' } else { c })
        .collect();
    format!("{root}/{flat}")
}

/// Creates the persistent node `path` if it is not there.
///
/// # Errors
/// The create fails for any reason but the node being there.
pub async fn ensure(client: &zk::Client, path: &str) -> Result<()> {
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    match client.create(path, b"", &persistent).await {
        Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
        Err(e) => Err(e).with_context(|| format!("create {path}")),
    }
}

/// Our node once the lock is ours.
#[derive(Clone, Debug)]
pub struct LockNode {
    /// Its path (deleting it releases the lock).
    pub path: String,
    /// The zxid that created it: a fencing token, growing with each hold.
    pub czxid: i64,
}

/// The recipe's acquire under `dir` (which must exist): our node, then
/// wait until no lower node is left.
///
/// # Errors
/// A ZooKeeper call fails, or our node is gone (the session expired).
pub async fn acquire(client: &zk::Client, dir: &str) -> Result<LockNode> {
    let ephemeral = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let prefix = format!("{dir}/lock-");
    let (stat, sequence) = client
        .create(&prefix, b"", &ephemeral)
        .await
        .with_context(|| format!("create {prefix}"))?;
    let ours = format!("lock-{sequence}");
    loop {
        let mut children = client
            .list_children(dir)
            .await
            .with_context(|| format!("list {dir}"))?;
        children.retain(|c| c.starts_with("lock-"));
        // Same width for every sequence number of one node: text order is
        // numeric order.
        children.sort_unstable();
        let Some(at) = children.iter().position(|c| *c == ours) else {
            bail!("our lock node {dir}/{ours} is gone (session expired?)");
        };
        if at == 0 {
            return Ok(LockNode {
                path: format!("{dir}/{ours}"),
                czxid: stat.czxid,
            });
        }
        let before = format!("{dir}/{}", children[at - 1]);
        match client.get_and_watch_data(&before).await {
            Ok((_, _, watcher)) => {
                watcher.changed().await;
            }
            Err(zk::Error::NoNode) => {}
            Err(e) => return Err(e).with_context(|| format!("watch {before}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_dir_flattens_the_name_one_level_under_the_root() {
        assert_eq!(lock_dir("/r", "bench/a/b"), "/r/bench_a_b");
        assert_eq!(lock_dir("/r", "plain"), "/r/plain");
    }
}
