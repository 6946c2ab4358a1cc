//! Whether the store moves to another master now: the part of following Sentinel that needs
//! no socket and no clock, so that every rule is a unit test.
//!
//! Inputs: what each sentinel says about the master (its address and the *configuration
//! epoch* of that address, from `SENTINEL MASTER <name>`, asked when its subscription is made
//! and again whenever it announces `+switch-master` for the name), that a sentinel's
//! subscription ended, and which master the store's connections go to. Output: the master to
//! move to, when there is one.
//!
//! The rule is Sentinel's own: **the configuration with the greater epoch wins**. A failover
//! gives the master a new epoch, greater than any before (its leader was elected for it by a
//! majority of the sentinels, or an operator forced it), and every sentinel adopts the
//! greatest it hears of. So the store moves as soon as one sentinel (the failover's leader,
//! first) names another master with a greater epoch than any other subscribed sentinel, and
//! never goes back to a configuration older than the one it moved to. A sentinel that lags (it
//! announces an earlier switch late) names a smaller epoch and is outvoted.
//!
//! Waiting for a majority of the sentinels to announce instead would cost the time the others
//! take to hear of the switch (the leader's next hello message, 60-320 ms measured), during
//! which every decision would still be written to the old master and lost.

use core::time::Duration;

/// A master's address as the sentinels write it: the host exactly as they announce it (an IP
/// address, or a name with `announce-hostnames yes`), and the port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Addr {
    pub(super) host: String,
    pub(super) port: u16,
}

impl Addr {
    pub(super) fn new(host: impl Into<String>, port: u16) -> Addr {
        Addr {
            host: host.into(),
            port,
        }
    }
}

/// What one sentinel says about the master: where it is, and the epoch of that configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct View {
    pub(super) addr: Addr,
    pub(super) epoch: u64,
}

/// Whether a `+switch-master` message is about `master` (`<master-name> <old-ip> <old-port>
/// <new-ip> <new-port>`). Its addresses are not used: the sentinel is asked for its
/// configuration with the epoch (a message carries none), which is at least as new.
pub(super) fn about(master: &str, message: &str) -> bool {
    let f: Vec<&str> = message.split_ascii_whitespace().collect();
    matches!(f.as_slice(), [name, _, old_port, _, new_port]
        if *name == master && old_port.parse::<u16>().is_ok() && new_port.parse::<u16>().is_ok())
}

/// The view in a `SENTINEL MASTER <name>` reply (field, value, field, value, ...): its `ip`,
/// `port` and `config-epoch`. `None` when one is missing or not a number.
pub(super) fn view_of(reply: &[String]) -> Option<View> {
    let field = |name: &str| {
        reply
            .chunks_exact(2)
            .find(|kv| kv[0] == name)
            .map(|kv| kv[1].as_str())
    };
    Some(View {
        addr: Addr::new(field("ip")?, field("port")?.parse().ok()?),
        epoch: field("config-epoch")?.parse().ok()?,
    })
}

/// How long to wait before subscribing to a sentinel again after `failures` attempts in a row
/// failed (0 after a subscription that was up): 100 ms, doubling, at most 1 s. Short, because
/// a switch announced meanwhile is only heard of when the subscription is back (the sentinel
/// is then asked where the master is); a refused connection costs a sentinel next to nothing.
pub(super) fn resubscribe_delay(failures: u32) -> Duration {
    const FIRST: Duration = Duration::from_millis(100);
    const MOST: Duration = Duration::from_secs(1);
    FIRST.saturating_mul(1 << failures.min(4)).min(MOST)
}

/// The master the store's connections go to.
#[derive(Debug)]
struct InUse {
    addr: Addr,
    /// The greatest epoch a sentinel gave for this address while it was in use; `None` until
    /// one did (the connections were opened where the sentinel the redis crate asked said).
    epoch: Option<u64>,
}

/// What the sentinels say about one master, and where the store's connections go.
#[derive(Debug)]
pub(super) struct Follow {
    /// Each configured sentinel's latest word while it is subscribed; `None` when it is not
    /// (not yet, or its subscription ended) or does not know the master.
    views: Vec<Option<View>>,
    /// `None` when the store has no connections (the next call asks the sentinels).
    in_use: Option<InUse>,
}

impl Follow {
    /// For `sentinels` configured sentinels, none subscribed yet, no connections.
    pub(super) fn new(sentinels: usize) -> Follow {
        Follow {
            views: vec![None; sentinels],
            in_use: None,
        }
    }

    /// Sentinel `i` said `view` (when subscribed, or after announcing a switch; `None`: it
    /// does not know the master). Returns the master to move to, if any.
    pub(super) fn said(&mut self, i: usize, view: Option<View>) -> Option<Addr> {
        if let Some(v) = self.views.get_mut(i) {
            *v = view;
        }
        self.decide()
    }

    /// Sentinel `i`'s subscription ended: its word no longer counts (a sentinel set up again
    /// with its epochs reset must not be outvoted forever by what it said before).
    pub(super) fn lost(&mut self, i: usize) {
        if let Some(v) = self.views.get_mut(i) {
            *v = None;
        }
    }

    /// The store's connections go to `addr` now (`None`: it dropped them, and the next call
    /// asks the sentinels). Returns the master to move to instead, when a subscribed sentinel
    /// names a newer one (the sentinel the crate asked may have been one that lags).
    pub(super) fn using(&mut self, addr: Option<Addr>) -> Option<Addr> {
        self.in_use = addr.map(|addr| InUse { addr, epoch: None });
        self.decide()
    }

    /// The newest configuration a subscribed sentinel gives: the greatest epoch, and when
    /// sentinels give different addresses with that epoch (only with epoch 0, sentinels set up
    /// to monitor different addresses), the one in use if it is among them, else the first
    /// sentinel's.
    pub(super) fn newest(&self) -> Option<&View> {
        let epoch = self.views.iter().flatten().map(|v| v.epoch).max()?;
        let mut newest = self.views.iter().flatten().filter(|v| v.epoch == epoch);
        let in_use = self.in_use.as_ref().map(|u| &u.addr);
        newest
            .clone()
            .find(|v| Some(&v.addr) == in_use)
            .or_else(|| newest.next())
    }

    /// Move when the newest configuration names another master than the one in use, and is
    /// newer than what the store knows of that one. With no connections nothing moves: the
    /// next call opens them, and [`Follow::using`] checks that master.
    fn decide(&mut self) -> Option<Addr> {
        let newest = self.newest()?.clone();
        let in_use = self.in_use.as_mut()?;
        if newest.addr == in_use.addr {
            in_use.epoch = Some(in_use.epoch.map_or(newest.epoch, |e| e.max(newest.epoch)));
            return None;
        }
        if in_use.epoch.is_some_and(|e| newest.epoch <= e) {
            return None;
        }
        Some(newest.addr)
    }
}

#[cfg(test)]
mod tests;
