//! The default store: a sharded concurrent map in this process.

use super::id;
use super::record::{Millis, SessionRecord};
use super::store::{Renewal, Reroute, SessionStore, StoreError};
use crate::minted;

/// Sessions in memory; they live as long as the process.
#[derive(Debug, Default)]
pub struct MemoryStore {
    map: minted::SharedMap<Box<str>, SessionRecord>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }
}

impl SessionStore for MemoryStore {
    async fn create(&self, record: SessionRecord) -> Result<String, StoreError> {
        let id = id::generate();
        self.map.insert(id.as_str().into(), record);
        Ok(id)
    }

    async fn renew(&self, id: &str, renewal: Renewal) -> Result<Option<SessionRecord>, StoreError> {
        // The shard guard lives only inside this block: nothing is held across an await.
        let Some(mut record) = self.map.get_mut(id) else {
            return Ok(None);
        };
        if record.expires_at <= renewal.now {
            // Expired: left for the reaper, which also ends it upstream.
            return Ok(None);
        }
        if !record.serves(renewal.caller) {
            return Ok(Some(record.clone()));
        }
        record.expires_at = renewal.expires_at;
        record.seq += 1;
        Ok(Some(record.clone()))
    }

    async fn get(&self, id: &str, now: Millis) -> Result<Option<SessionRecord>, StoreError> {
        Ok(self
            .map
            .get(id)
            .filter(|record| record.expires_at > now)
            .map(|record| record.clone()))
    }

    async fn remove(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        Ok(self.map.remove(id).map(|(_, record)| record))
    }

    async fn reroute(&self, id: &str, change: Reroute<'_>) -> Result<bool, StoreError> {
        let Reroute { from, to } = change;
        let Some(mut record) = self.map.get_mut(id) else {
            return Ok(false);
        };
        if record.backing.upstream_session.as_deref() != from {
            return Ok(false);
        }
        record.backing = to.clone();
        Ok(true)
    }

    async fn take_expired(
        &self,
        now: Millis,
        limit: usize,
    ) -> Result<Vec<(String, SessionRecord)>, StoreError> {
        let mut expired = Vec::new();
        self.map.retain(|id, record| {
            if record.expires_at <= now && expired.len() < limit {
                expired.push((id.to_string(), record.clone()));
                false
            } else {
                true
            }
        });
        Ok(expired)
    }

    async fn list(&self, limit: usize) -> Result<Vec<(String, SessionRecord)>, StoreError> {
        Ok(self
            .map
            .iter()
            .take(limit)
            .map(|entry| (entry.key().to_string(), entry.value().clone()))
            .collect())
    }

    async fn count(&self) -> Result<Option<usize>, StoreError> {
        Ok(Some(self.map.len()))
    }
}
