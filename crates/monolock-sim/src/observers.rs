//! The rules of observers (docs/protocol.md, "Version 2 extension: values
//! and observers"), checked as observers read their states.
//!
//! Each observation (one watch of one host on one lock, from its INITIAL
//! state to its end) is checked on its own: tokens never go back; a token
//! whose release it was told of is never told to hold again; a holder is
//! one the server granted before the state was read, a release one the
//! server made; a RELEASED's reason is how the claim ended as the server's
//! table and, where they can tell, the nemesis and the holder know it; and
//! a value is one its holder wrote for that claim, never an older one
//! after a newer. Once the faults stop and the table is empty, every
//! observer's last state must be the table's.
//!
//! Values name their claim (`c3 claim 1 ask 4 v2`: host, claim slot, the
//! slot's ask, and how many times it was replaced), written down by the
//! host before the frame goes out, so that the checker can tell which
//! claim a value belongs to without asking the server.

use std::collections::{BTreeMap, BTreeSet};

/// One state an observer read (the client's `LockState`, as text).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Seen {
    /// `free`, `held`, `granted`, `value` or `released`.
    pub(crate) event: &'static str,
    pub(crate) held: bool,
    pub(crate) token: u64,
    pub(crate) value: String,
    /// For `released`: `released`, `expired`, `forced` or `ended_by_server`.
    pub(crate) reason: Option<&'static str>,
    pub(crate) initial: bool,
    pub(crate) coalesced: bool,
}

impl std::fmt::Display for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} token {}", self.event, self.token)?;
        if !self.value.is_empty() {
            write!(f, " value {:?}", self.value)?;
        }
        if let Some(reason) = self.reason {
            write!(f, " ({reason})")?;
        }
        if self.initial {
            write!(f, " initial")?;
        }
        if self.coalesced {
            write!(f, " coalesced")?;
        }
        Ok(())
    }
}

/// A claim a value belongs to: host, claim slot, the slot's ask.
pub(crate) type ClaimId = (usize, u32, u64);

/// The value a host writes for ask `ask` of claim `slot`, replaced `n`
/// times.
pub(crate) fn value_of(client: usize, slot: u32, ask: u64, n: u32) -> String {
    format!("c{client} claim {slot} ask {ask} v{n}")
}

/// One observation as the checker follows it.
struct Observation {
    lock: String,
    /// The highest token it was told of.
    last_token: u64,
    /// Tokens whose release it was told of.
    ended: BTreeSet<u64>,
    /// Per token, the latest replacement number of its value it was told.
    value_gen: BTreeMap<u64, u32>,
}

/// What the observer rules keep.
#[derive(Default)]
pub(crate) struct Observers {
    observations: BTreeMap<(usize, u64), Observation>,
    /// Every value a host wrote, and its claim and replacement number.
    written: BTreeMap<String, (ClaimId, u32)>,
    /// Per token, the claim its values named (the first seen).
    claim_of_token: BTreeMap<u64, ClaimId>,
    /// Per token, the claim that the holder said it is (once the grant
    /// reached it), and the value it asked with.
    holder_of_token: BTreeMap<u64, ClaimId>,
    /// Per token, the reason the server's table released it with.
    table_reason: BTreeMap<u64, &'static str>,
    /// Per token, how its claim ended as someone other than the server
    /// knows it (the nemesis forced it, the holder read RELEASED).
    known_reason: BTreeMap<u64, &'static str>,
    /// Per token, the reasons observers were told.
    told_reason: BTreeMap<u64, (&'static str, usize)>,
    /// States read, by event.
    pub(crate) counts: BTreeMap<&'static str, u64>,
}

impl Observers {
    /// Host `client` writes `value` for claim `claim`, replaced `n` times.
    pub(crate) fn written(&mut self, value: String, claim: ClaimId, n: u32) {
        self.written.insert(value, (claim, n));
    }

    /// The holder of claim `claim` learned its token.
    pub(crate) fn holder_learned(&mut self, token: u64, claim: ClaimId) -> Option<String> {
        self.holder_of_token.insert(token, claim);
        match self.claim_of_token.get(&token) {
            Some(named) if *named != claim => Some(format!(
                "observers were told token {token} with a value of c{} claim {} ask {}, \
                 but c{} claim {} ask {} holds it",
                named.0, named.1, named.2, claim.0, claim.1, claim.2
            )),
            _ => None,
        }
    }

    /// The server's table released `token` for `reason` (the wire's name).
    pub(crate) fn table_released(&mut self, token: u64, reason: &'static str) -> Option<String> {
        self.table_reason.insert(token, reason);
        self.reasons_agree(token)
    }

    /// Someone other than the server knows why `token`'s claim ended.
    pub(crate) fn known_end(&mut self, token: u64, reason: &'static str) -> Option<String> {
        self.known_reason.entry(token).or_insert(reason);
        self.reasons_agree(token)
    }

    fn reasons_agree(&self, token: u64) -> Option<String> {
        let (told, observer) = *self.told_reason.get(&token)?;
        let table = self.table_reason.get(&token);
        let known = self.known_reason.get(&token);
        for (expected, by) in [(table, "the server's table"), (known, "the checker")] {
            if let Some(expected) = expected
                && *expected != told
            {
                return Some(format!(
                    "c{observer} was told token {token} was released ({told}), \
                     but {by} says {expected}"
                ));
            }
        }
        None
    }

    /// Observer `client` read `seen` on its watch `watch` of `lock`.
    /// `issued` says whether (and for which lock) the server granted a
    /// token; `holder` is the lock's holder in the server's table now.
    pub(crate) fn read(
        &mut self,
        client: usize,
        watch: u64,
        lock: &str,
        seen: &Seen,
        issued: impl Fn(u64) -> Option<String>,
        holder: Option<u64>,
    ) -> Option<String> {
        *self.counts.entry(seen.event).or_default() += 1;
        if seen.coalesced {
            *self.counts.entry("coalesced").or_default() += 1;
        }
        let who = format!("c{client}'s watch {watch} of {lock}");
        let observation = self
            .observations
            .entry((client, watch))
            .or_insert_with(|| Observation {
                lock: lock.to_owned(),
                last_token: 0,
                ended: BTreeSet::new(),
                value_gen: BTreeMap::new(),
            });
        if observation.lock != lock {
            return Some(format!("{who} read a state of {}", observation.lock));
        }
        let token = seen.token;
        if token != 0 && token < observation.last_token {
            return Some(format!(
                "{who} was told {seen} after token {}: a token went back",
                observation.last_token
            ));
        }
        if seen.held && observation.ended.contains(&token) {
            return Some(format!(
                "{who} was told {seen} after it was told that claim ended: an older state after a newer one"
            ));
        }
        observation.last_token = observation.last_token.max(token);
        if token != 0 {
            match issued(token) {
                None if seen.held => {
                    return Some(format!(
                        "{who} was told {seen} before the server granted that token"
                    ));
                }
                None => return Some(format!("{who} was told {seen}, a token no server issued")),
                Some(granted) if granted != lock => {
                    return Some(format!(
                        "{who} was told {seen}, a token granted for {granted}"
                    ));
                }
                Some(_) => {}
            }
        }
        if !seen.held {
            if token != 0 {
                observation.ended.insert(token);
            }
            if token != 0 && holder == Some(token) {
                return Some(format!(
                    "{who} was told {seen} while the server's table still holds it"
                ));
            }
            if !seen.value.is_empty() {
                return Some(format!("{who} was told {seen}: a value on a free lock"));
            }
            if let Some(reason) = seen.reason {
                self.told_reason.entry(token).or_insert((reason, client));
                return self.reasons_agree(token);
            }
            return None;
        }
        // Held: the value must be one the holder wrote for this claim, and
        // never an older one after a newer.
        if seen.value.is_empty() {
            return self.holder_of_token.get(&token).map(|claim| {
                format!(
                    "{who} was told {seen} with no value, but c{} claim {} asked with one",
                    claim.0, claim.1
                )
            });
        }
        let Some(&(claim, n)) = self.written.get(&seen.value) else {
            return Some(format!("{who} was told {seen}, a value no host wrote"));
        };
        let named = *self.claim_of_token.entry(token).or_insert(claim);
        if named != claim {
            return Some(format!(
                "{who} was told {seen}, a value of another claim than token {token}'s earlier values"
            ));
        }
        if let Some(holder) = self.holder_of_token.get(&token)
            && *holder != claim
        {
            return Some(format!(
                "{who} was told {seen}, but c{} claim {} ask {} holds token {token}",
                holder.0, holder.1, holder.2
            ));
        }
        let last = observation.value_gen.entry(token).or_insert(n);
        if n < *last {
            return Some(format!(
                "{who} was told {seen} after replacement {} of that value: a value went back",
                *last
            ));
        }
        *last = n;
        None
    }

    /// An observation ended (its stream, its session): the highest token
    /// it was told of.
    pub(crate) fn ended(&mut self, client: usize, watch: u64) -> u64 {
        self.observations
            .remove(&(client, watch))
            .map_or(0, |observation| observation.last_token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(event: &'static str, token: u64, value: &str) -> Seen {
        Seen {
            event,
            held: matches!(event, "held" | "granted" | "value"),
            token,
            value: value.into(),
            reason: (event == "released").then_some("released"),
            initial: false,
            coalesced: false,
        }
    }

    fn issued(token: u64) -> Option<String> {
        (token <= 20).then(|| "a".to_owned())
    }

    #[test]
    fn a_token_going_back_or_a_held_state_after_its_release_is_found() {
        let mut o = Observers::default();
        assert_eq!(
            o.read(0, 1, "a", &state("granted", 11, ""), issued, Some(11)),
            None
        );
        assert_eq!(
            o.read(0, 1, "a", &state("released", 11, ""), issued, None),
            None
        );
        let back = o.read(0, 1, "a", &state("held", 11, ""), issued, None);
        assert!(back.is_some_and(|w| w.contains("after it was told that claim ended")));
        let mut o = Observers::default();
        assert_eq!(
            o.read(0, 1, "a", &state("granted", 12, ""), issued, Some(12)),
            None
        );
        let back = o.read(0, 1, "a", &state("held", 11, ""), issued, None);
        assert!(back.is_some_and(|w| w.contains("a token went back")));
        // Another watch is followed on its own.
        assert_eq!(
            o.read(0, 2, "a", &state("held", 11, ""), issued, None),
            None
        );
    }

    #[test]
    fn a_grant_told_before_the_server_made_it_or_a_release_while_held_is_found() {
        let mut o = Observers::default();
        let early = o.read(0, 1, "a", &state("granted", 21, ""), issued, None);
        assert!(early.is_some_and(|w| w.contains("before the server granted")));
        let held = o.read(0, 2, "a", &state("released", 5, ""), issued, Some(5));
        assert!(held.is_some_and(|w| w.contains("still holds it")));
        let other = o.read(0, 3, "b", &state("held", 5, ""), issued, None);
        assert!(other.is_some_and(|w| w.contains("granted for a")));
    }

    #[test]
    fn values_must_be_the_holders_and_never_go_back() {
        let mut o = Observers::default();
        let (v0, v1) = (value_of(3, 1, 4, 0), value_of(3, 1, 4, 1));
        o.written(v0.clone(), (3, 1, 4), 0);
        o.written(v1.clone(), (3, 1, 4), 1);
        o.written(value_of(2, 0, 1, 0), (2, 0, 1), 0);
        assert_eq!(
            o.read(0, 1, "a", &state("granted", 7, &v0), issued, Some(7)),
            None
        );
        assert_eq!(
            o.read(0, 1, "a", &state("value", 7, &v1), issued, Some(7)),
            None
        );
        let back = o.read(0, 1, "a", &state("held", 7, &v0), issued, Some(7));
        assert!(back.is_some_and(|w| w.contains("a value went back")));
        let stranger = o.read(0, 2, "a", &state("held", 7, "nobody"), issued, Some(7));
        assert!(stranger.is_some_and(|w| w.contains("no host wrote")));
        let other = o.read(
            0,
            3,
            "a",
            &state("held", 7, &value_of(2, 0, 1, 0)),
            issued,
            None,
        );
        assert!(other.is_some_and(|w| w.contains("another claim")));
        assert!(o.holder_learned(7, (2, 0, 1)).is_some());
        assert_eq!(o.holder_learned(7, (3, 1, 4)), None);
        let empty = o.read(0, 4, "a", &state("held", 7, ""), issued, Some(7));
        assert!(empty.is_some_and(|w| w.contains("with no value")));
    }

    #[test]
    fn a_release_reason_must_match_the_table_and_what_the_checker_knows() {
        let mut o = Observers::default();
        assert_eq!(
            o.read(0, 1, "a", &state("released", 7, ""), issued, None),
            None
        );
        assert_eq!(o.table_released(7, "released"), None);
        let forced = o.known_end(7, "forced");
        assert!(forced.is_some_and(|w| w.contains("the checker says forced")));
        let mut o = Observers::default();
        assert_eq!(o.table_released(8, "expired"), None);
        let told = o.read(0, 1, "a", &state("released", 8, ""), issued, None);
        assert!(told.is_some_and(|w| w.contains("the server's table says expired")));
    }
}
