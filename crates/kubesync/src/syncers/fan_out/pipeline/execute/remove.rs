//! The executor's removals: a copy deleted (or released) with the destination cluster's own
//! credentials only where the declaration's record says kubesync made it, else as the embedder
//! says for copies it has no record of making ([`Unrecorded`]).

use kube::core::ApiResource;

use super::{Done, Executor};
use crate::error::{Error, Result};
use crate::runtime::Context;
use crate::syncers::fan_out::plan::{Delete, Job};
use crate::syncers::fan_out::record::Unrecorded;
use crate::syncers::fan_out::rules::{self, FIELD_MANAGER};
use crate::syncers::fan_out::spec::DestinationRef;

/// How many copies left in place the executor remembers having said so of.
const LEFT_REMEMBERED: usize = 10_000;

impl Executor {
    /// The cluster of `at` as the copy there (of `uid`) is removed: with its own credentials
    /// if `job`'s record says kubesync made it, else as the embedder says for copies it has
    /// no record of making (given who the declaration acts as there); `Err` says why it is
    /// left in place.
    fn removing_as(
        &self,
        ctx: &Context,
        at: &DestinationRef,
        (uid, job): (Option<&str>, &Job),
    ) -> Result<std::result::Result<crate::Cluster, String>> {
        let cluster = ctx.require_cluster(&at.cluster)?;
        if job.vouch.made_by_kubesync(uid) {
            return Ok(Ok(cluster));
        }
        let acting = job.acting_in(&at.cluster);
        Ok(match self.unrecorded.as_ref().map(|f| f(at, acting)) {
            None | Some(Unrecorded::Own) => Ok(cluster),
            Some(Unrecorded::As(who)) => Ok(cluster.acting_as(&who)),
            Some(Unrecorded::Leave(why)) => Err(why),
        })
    }

    /// Deletes the copies `deletes` of the kind `ar` a declaration no longer copies (as this
    /// process's own identity where `job`'s record says kubesync made them); the first
    /// failure is the error (the kind is retired once all are gone).
    pub(in super::super) async fn retire(
        &self,
        ctx: &Context,
        (ar, job): (&ApiResource, &Job),
        deletes: Vec<Delete>,
    ) -> Result<()> {
        for Delete { at, uid, .. } in deletes {
            let cluster = self
                .removing_as(ctx, &at, (uid.as_deref(), job))?
                .map_err(|why| Error::LeftInPlace(left_in_place(&at, &why)))?;
            self.delete_in(&cluster, ar, &at, uid.as_deref()).await?;
            tracing::info!(destination = %at, kind = %ar.kind, "the source kind changed; deleted the old copy");
        }
        Ok(())
    }

    /// Deletes (or releases) one copy of the plan, unless it is gone already.
    pub(super) async fn remove(&self, ctx: &Context, job: &Job, d: Delete, confirm: bool) -> Done {
        let ar = &job.resource;
        let Delete { at, uid, orphan } = d;
        if !orphan
            && self
                .deleted_already(ctx, ar, &at, uid.as_deref(), confirm)
                .await
        {
            return Done::deleted(true, uid);
        }
        let cluster = match self.removing_as(ctx, &at, (uid.as_deref(), job)) {
            Ok(Ok(cluster)) => cluster,
            Ok(Err(why)) => {
                let message = left_in_place(&at, &why);
                match self.first_left(&at, uid.as_deref()) {
                    true => tracing::warn!(destination = %at, orphan, "{message}"),
                    false => tracing::debug!(destination = %at, orphan, "{message}"),
                }
                return Done::deleted(false, None);
            }
            Err(e) => {
                tracing::warn!(destination = %at, orphan, error = %e, "removing a copy failed");
                return Done::deleted(false, None);
            }
        };
        let gone = if orphan {
            self.release_copy(&cluster, ar, &at, uid.as_deref()).await
        } else {
            self.delete_in(&cluster, ar, &at, uid.as_deref())
                .await
                .map(|_| ())
        };
        if let Err(e) = &gone {
            tracing::warn!(destination = %at, orphan, error = %e, "removing a copy failed");
        }
        Done::deleted(gone.is_ok(), uid.filter(|_| gone.is_ok()))
    }

    /// Whether the copy at `at` (of `uid`) is left in place for the first time (said once at
    /// `warn`, then at `debug`: its clean-up is retried). At most [`LEFT_REMEMBERED`] are
    /// remembered; beyond, the memory starts again.
    fn first_left(&self, at: &DestinationRef, uid: Option<&str>) -> bool {
        let mut left = self.left.lock();
        if left.len() >= LEFT_REMEMBERED {
            left.clear();
        }
        left.insert(format!("{at}/{}", uid.unwrap_or_default()))
    }

    /// Keeps a copy and removes kubesync's marks from it: it becomes an ordinary object. A
    /// copy already gone, or replaced by another object (its uid no longer matches), is left.
    async fn release_copy(
        &self,
        cluster: &crate::Cluster,
        ar: &ApiResource,
        at: &DestinationRef,
        uid: Option<&str>,
    ) -> Result<()> {
        let released = self
            .writer
            .merge_patch(
                cluster,
                ar,
                at.namespace(),
                &at.name,
                &rules::release_patch(uid),
                FIELD_MANAGER,
            )
            .await;
        match released {
            Ok(_) => {
                tracing::info!(destination = %at, "released the copy (kept, kubesync's marks removed)");
                Ok(())
            }
            Err(Error::Kube(kube::Error::Api(s))) if s.is_not_found() || s.is_conflict() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Whether the copy at `at` (of `uid`) is gone already or going: this writer asked to
    /// delete it moments ago (the store does not show it yet), or, with `confirm`, a live read
    /// finds no such object. Then no delete is sent.
    async fn deleted_already(
        &self,
        ctx: &Context,
        ar: &ApiResource,
        at: &DestinationRef,
        uid: Option<&str>,
        confirm: bool,
    ) -> bool {
        let Some(cluster) = ctx.cluster(&at.cluster) else {
            return false;
        };
        if let Some(uid) = uid
            && self
                .writer
                .deleted_recently(&cluster, ar, (at.namespace(), &at.name), uid)
        {
            return true;
        }
        if !confirm {
            return false;
        }
        match self.read(ctx, ar, at).await {
            Ok(None) => true,
            Ok(Some(live)) => uid.is_some_and(|u| live.metadata.uid.as_deref() != Some(u)),
            Err(_) => false,
        }
    }
}

/// Why the copy at `at`, which kubesync has no record of making, is not removed (for people).
fn left_in_place(at: &DestinationRef, why: &str) -> String {
    crate::error::bounded(format!(
        "left {at} in place: kubesync has no record of making it (it carries the declaration's marks, which anyone who may patch it can write), and {why}"
    ))
}
