//! The paged reads of an audit: every Redis call it makes, each bounded
//! (see the module comment of `audit`), each reply handed to the
//! [`Auditor`] and counted in the progress.

use echomq_protocol::call::audit::{AuditHead, AuditKeys, AuditPage};
use echomq_protocol::call::dag::AuditDag;
use echomq_protocol::call::flow::AuditFlows;
use echomq_protocol::call::groups::{AuditGroups, GroupAuditPage as Page, GroupAuditStep as Step};
use echomq_protocol::group::GroupKeys;
use echomq_protocol::QueueKeys;

use super::checks::Auditor;
use super::report::{AuditOptions, AuditProgress, AuditReport};
use super::{FLOW_STEP, KEYS_STEP, LISTS, PAGE, SETS};
use crate::connection::pool::Connection;
use crate::error::Result;

/// An audit of one queue: `Audit::new(&conn, "mail").run().await`, with
/// [`AuditOptions`] (`.options(..)`) and a progress callback after every
/// call (`.on_progress(..)`) when wanted.
pub struct Audit<'a, F = fn(AuditProgress)> {
    conn: &'a Connection,
    queue: &'a str,
    opts: AuditOptions,
    progress: F,
}

impl std::fmt::Debug for Audit<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Audit")
            .field("queue", &self.queue)
            .field("opts", &self.opts)
            .finish()
    }
}

impl<'a> Audit<'a> {
    /// An audit of `queue` with the default options (live mode), no
    /// progress callback.
    pub fn new(conn: &'a Connection, queue: &'a str) -> Self {
        Audit {
            conn,
            queue,
            opts: AuditOptions::default(),
            progress: |_| {},
        }
    }
}

impl<'a, F: FnMut(AuditProgress)> Audit<'a, F> {
    /// With these options.
    pub fn options(mut self, opts: AuditOptions) -> Self {
        self.opts = opts;
        self
    }

    /// Tells `progress` after every call.
    pub fn on_progress<G: FnMut(AuditProgress)>(self, progress: G) -> Audit<'a, G> {
        Audit {
            conn: self.conn,
            queue: self.queue,
            opts: self.opts,
            progress,
        }
    }

    /// Runs it: every read, then the report.
    pub async fn run(mut self) -> Result<AuditReport> {
        run(self.conn, self.queue, &self.opts, &mut self.progress).await
    }
}

async fn run(
    conn: &Connection,
    queue: &str,
    opts: &AuditOptions,
    progress: &mut impl FnMut(AuditProgress),
) -> Result<AuditReport> {
    let keys = QueueKeys::new(conn.prefix(), queue)?;
    let head = conn.call(&AuditHead { keys: &keys }).await?;
    let mut a = Auditor::new(opts, head);
    let ids_total = LISTS.iter().chain(SETS.iter()).map(|s| a.size(s)).sum();
    let mut r = Reads {
        conn,
        keys: &keys,
        p: AuditProgress {
            phase: "head",
            calls: 1,
            ids_read: 0,
            ids_total,
        },
        progress,
    };
    (r.progress)(r.p);
    r.states(&mut a).await?;
    r.keys(&mut a).await?;
    r.stalled(&mut a).await?;
    r.flows(&mut a).await?;
    r.dag(&mut a).await?;
    r.groups(&mut a).await?;
    let mut report = a.finish();
    report.calls = r.p.calls;
    Ok(report)
}

/// The reads of one audit and its progress.
struct Reads<'a, F> {
    conn: &'a Connection,
    keys: &'a QueueKeys,
    p: AuditProgress,
    progress: &'a mut F,
}

impl<F: FnMut(AuditProgress)> Reads<'_, F> {
    /// One more call made.
    fn called(&mut self) {
        self.p.calls += 1;
        (self.progress)(self.p);
    }

    /// Every state structure page by page, the lists first: the other reads
    /// check against them.
    async fn states(&mut self, a: &mut Auditor) -> Result<()> {
        for state in LISTS.iter().chain(SETS.iter()).chain(["repeat"].iter()) {
            self.p.phase = state;
            let mut from = 0;
            loop {
                let page = self
                    .conn
                    .call(&AuditPage {
                        keys: self.keys,
                        state,
                        from,
                        count: PAGE,
                    })
                    .await?;
                let n = page.rows.len() as u64;
                a.page(state, &page);
                if *state != "repeat" {
                    self.p.ids_read += n;
                }
                self.called();
                // Ids that arrive while the audit runs are not its business.
                if n < PAGE || from + n >= page.size {
                    break;
                }
                from += n;
            }
        }
        Ok(())
    }

    /// The keys by SCAN steps: locks and orphan hashes.
    async fn keys(&mut self, a: &mut Auditor) -> Result<()> {
        self.p.phase = "keys";
        let mut cursor = String::from("0");
        loop {
            let step = self
                .conn
                .call(&AuditKeys {
                    keys: self.keys,
                    cursor: &cursor,
                    count: KEYS_STEP,
                })
                .await?;
            self.called();
            a.keys(&step);
            if step.cursor == "0" {
                return Ok(());
            }
            cursor = step.cursor;
        }
    }

    /// The `stalled` set by SSCAN.
    async fn stalled(&mut self, a: &mut Auditor) -> Result<()> {
        self.p.phase = "stalled";
        let stalled = self.keys.key("stalled");
        let mut cursor = String::from("0");
        loop {
            let (next, ids) = sscan(self.conn, &stalled, &cursor, KEYS_STEP).await?;
            self.called();
            a.stalled(&ids);
            if next == "0" {
                return Ok(());
            }
            cursor = next;
        }
    }

    /// The flow checks in budgeted steps.
    async fn flows(&mut self, a: &mut Auditor) -> Result<()> {
        self.p.phase = "flows";
        let (mut parent, mut cursor) = (0, String::from("0"));
        loop {
            let step = self
                .conn
                .call(&AuditFlows {
                    keys: self.keys,
                    parent,
                    cursor: &cursor,
                    budget: FLOW_STEP,
                })
                .await?;
            self.called();
            a.flows(step.findings);
            if step.done {
                return Ok(());
            }
            (parent, cursor) = (step.parent, step.cursor);
        }
    }

    /// The DAG checks D1/D2 (docs/flows.md §DAGs), a page of
    /// `{P}dag:pending` per call.
    async fn dag(&mut self, a: &mut Auditor) -> Result<()> {
        self.p.phase = "dag";
        let mut cursor = String::from("0");
        loop {
            let page = self
                .conn
                .call(&AuditDag {
                    keys: self.keys,
                    cursor: &cursor,
                    count: PAGE,
                })
                .await?;
            self.called();
            a.dag(page.findings);
            if page.cursor == "0" {
                return Ok(());
            }
            cursor = page.cursor;
        }
    }

    /// One step of the group reads.
    async fn group_step(&mut self, groups: &GroupKeys, step: Step<'_>) -> Result<Page> {
        let page = self
            .conn
            .call(&AuditGroups {
                keys: self.keys,
                groups,
                step,
                count: PAGE,
            })
            .await?;
        self.called();
        Ok(page)
    }

    /// The group checks G1–G5 (docs/groups.md §Audit), one bounded step per
    /// call: `{P}gr:jobs` by HSCAN, then the groups by index page.
    async fn groups(&mut self, a: &mut Auditor) -> Result<()> {
        self.p.phase = "groups";
        let groups = GroupKeys::new(self.keys);
        let mut cursor = String::from("0");
        while let Page::Jobs(next, rows) = self
            .group_step(&groups, Step::Jobs { cursor: &cursor })
            .await?
        {
            a.group_released(rows);
            if next == "0" {
                break;
            }
            cursor = next;
        }
        let mut from = 0;
        while let Page::Groups(rows) = self.group_step(&groups, Step::Groups { from }).await? {
            let n = rows.len() as u64;
            for (gid, _paused) in rows {
                self.group(a, &groups, &gid).await?;
            }
            if n < PAGE {
                break;
            }
            from += n;
        }
        a.forgive_unreleased();
        Ok(())
    }

    /// One group: its unreleased ids (waiting, then delayed) by page and its
    /// active set by SSCAN.
    async fn group(&mut self, a: &mut Auditor, groups: &GroupKeys, gid: &str) -> Result<()> {
        let mut at = 0;
        while let Page::Wait(ids) = self
            .group_step(
                groups,
                Step::Wait {
                    group: gid,
                    from: at,
                },
            )
            .await?
        {
            a.group_waiting(gid, &ids);
            if (ids.len() as u64) < PAGE {
                break;
            }
            at += PAGE;
        }
        let mut at = 0;
        while let Page::Delayed(indexed, ids) = self
            .group_step(
                groups,
                Step::Delayed {
                    group: gid,
                    from: at,
                },
            )
            .await?
        {
            a.group_delayed(gid, at == 0, indexed, &ids);
            if (ids.len() as u64) < PAGE {
                break;
            }
            at += PAGE;
        }
        let mut cursor = String::from("0");
        while let Page::Active(next, ids) = self
            .group_step(
                groups,
                Step::Active {
                    group: gid,
                    cursor: &cursor,
                },
            )
            .await?
        {
            a.group_active(gid, ids);
            if next == "0" {
                break;
            }
            cursor = next;
        }
        a.group_done(gid);
        Ok(())
    }
}

/// One `SSCAN` step of a set (`"0"` as the next cursor once done).
async fn sscan(
    conn: &Connection,
    key: &str,
    cursor: &str,
    count: u64,
) -> Result<(String, Vec<String>)> {
    use fred::prelude::ClientLike;
    use fred::types::{ClusterHash, CustomCommand};
    let slot = fred::util::redis_keyslot(key.as_bytes());
    let command = CustomCommand::new_static("SSCAN", ClusterHash::Custom(slot), false);
    Ok(conn
        .pool()
        .next()
        .custom(
            command,
            vec![
                key.to_owned(),
                cursor.to_owned(),
                "COUNT".to_owned(),
                count.to_string(),
            ],
        )
        .await?)
}
