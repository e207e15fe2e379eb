//! The open connections, so that near the connection cap the ones idle the
//! longest (no response in flight: keep-alive connections between
//! requests, connections that never finished a request head) make room for
//! new ones, as nginx reuses its oldest keep-alive connections. Without it,
//! `--max-connections` idle sockets would lock every new client out until
//! their timeouts passed.

use crate::activity::Activity;
use std::{
    collections::HashMap,
    sync::{Arc, Mutex, Weak},
};

#[derive(Debug, Default)]
pub(crate) struct OpenConnections {
    open: Mutex<(u64, HashMap<u64, Weak<Activity>>)>,
}

/// Held while a connection lives; removes it from the list when dropped.
#[derive(Debug)]
pub(crate) struct Registration {
    list: Arc<OpenConnections>,
    key: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.list.lock().1.remove(&self.key);
    }
}

impl OpenConnections {
    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, HashMap<u64, Weak<Activity>>)> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn register(self: &Arc<Self>, activity: &Arc<Activity>) -> Registration {
        let mut open = self.lock();
        open.0 += 1;
        let key = open.0;
        open.1.insert(key, Arc::downgrade(activity));
        Registration { list: self.clone(), key }
    }

    /// Closes the connection with no response in flight that has been
    /// quiet the longest. Returns whether there was one.
    pub fn evict_idlest(&self) -> bool {
        let open = self.lock();
        let idlest = open.1.values().filter_map(Weak::upgrade).filter(|a| a.is_idle()).max_by_key(|a| a.quiet_ms());
        drop(open);
        idlest.inspect(|a| a.evict()).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_idlest_connection_without_a_response_is_evicted() {
        let list = Arc::new(OpenConnections::default());
        let (busy, idle) = (Activity::new(None), Activity::new(None));
        let _r = (list.register(&busy), list.register(&idle));
        let _response = busy.response();
        assert!(list.evict_idlest());
        assert_eq!(idle.verdict(std::time::Duration::from_secs(60)), crate::activity::Verdict::Evicted);
        assert_eq!(busy.verdict(std::time::Duration::from_secs(60)), crate::activity::Verdict::Keep);
        drop(_r);
        assert!(!list.evict_idlest(), "registrations dropped: nothing left");
    }
}
