//! Adding jobs: validation and encoding first, then one typed call per job.

use echomq_protocol::call::add::{AddJob, AddKind};
use echomq_protocol::call::add_group::AddStandardJobs;
use echomq_protocol::call::flow::ChildKeys;
use echomq_protocol::call::groups::{AddGroupJob, GroupAdded};
use echomq_protocol::group::GroupKeys;
use echomq_protocol::packing::AddArgs;
use echomq_protocol::validate::ValidationError;
use echomq_protocol::JobOptions;
use serde::Serialize;
use serde_json::{Map, Value};
use tracing::Instrument;

use super::handle::Queue;
use super::types::NewJob;
use crate::error::{Error, Result};
use crate::groups::add::{AnyAdd, BulkAdd, EntryAnswer, EntryRefusal};

/// One job validated and encoded; nothing is written until it is called.
pub(super) struct Prepared {
    kind: AddKind,
    name: String,
    custom_id: String,
    timestamp: u64,
    data: String,
    opts: Map<String, Value>,
    /// `{P}de:<id>` when the job is deduplicated, sent as AddArgs[9] as Node does.
    dedup_key: Option<String>,
    /// With `opts.parent`: the parent's key, its `:dependencies` set and the
    /// descriptor the add scripts store, as Node's `queue.add` sends them.
    parent: Option<ParentArgs>,
    /// With `opts.group`: the group, its priority inside it and the keys of
    /// the extension (docs/groups.md).
    group: Option<(String, i64, GroupKeys)>,
    /// The blob the data was offloaded to, given its job once added.
    #[cfg(feature = "codec")]
    blob: Option<String>,
}

struct ParentArgs {
    key: String,
    dependencies: String,
    descriptor: Value,
}

impl Prepared {
    fn group_name(&self) -> Option<&str> {
        self.group.as_ref().map(|g| g.0.as_str())
    }

    /// The AddArgs every add script takes, grouped or not.
    fn add_args<'a>(&'a self, prefix_key: &'a str) -> AddArgs<'a> {
        AddArgs {
            prefix_key,
            custom_id: &self.custom_id,
            name: &self.name,
            timestamp: self.timestamp,
            deduplication_key: self.dedup_key.as_deref(),
            parent_key: self.parent.as_ref().map(|a| a.key.as_str()),
            parent_dependencies_key: self.parent.as_ref().map(|a| a.dependencies.as_str()),
            parent: self.parent.as_ref().map(|a| &a.descriptor),
            ..Default::default()
        }
    }
}

impl Queue {
    fn merged(&self, options: JobOptions) -> JobOptions {
        if self.options.default_job_options == JobOptions::default() {
            return options;
        }
        let mut stored = self.options.default_job_options.to_stored();
        for (k, v) in options.to_stored() {
            stored.insert(k, v);
        }
        JobOptions::from_stored(&stored)
    }

    /// The data as JSON text, refused when larger than `limit` bytes.
    pub(super) fn encode_data(data: &impl Serialize, limit: usize) -> Result<String> {
        let json = serde_json::to_string(data).map_err(|e| ValidationError::Data(e.to_string()))?;
        if json.len() > limit {
            return Err(ValidationError::DataTooLarge {
                size: json.len(),
                limit,
            }
            .into());
        }
        Ok(json)
    }

    /// The data as stored: [`Queue::encode_data`] (the limit applies to the
    /// plain JSON), then the queue's payload codec when it names one.
    pub(super) fn store_data(&self, data: &impl Serialize, limit: usize) -> Result<String> {
        let json = Self::encode_data(data, limit)?;
        #[cfg(feature = "codec")]
        let json = self.options.codec.encode_text(json)?;
        Ok(json)
    }

    fn prepare(&self, name: &str, data: &impl Serialize, options: JobOptions) -> Result<Prepared> {
        if name.is_empty() {
            return Err(ValidationError::EmptyJobName.into());
        }
        let options = self.merged(options);
        options.validate()?;
        // With offload, what Redis holds of a large payload is its
        // reference: the cap is the blob store's.
        #[cfg(feature = "codec")]
        let cap = match self.options.codec.offload {
            Some(_) => crate::codec::MAX_BLOB_BYTES,
            None => self.options.max_data_bytes,
        };
        #[cfg(not(feature = "codec"))]
        let cap = self.options.max_data_bytes;
        let limit = options
            .size_limit
            .map(|l| l as usize)
            .unwrap_or(cap)
            .min(cap);
        Ok(Prepared {
            kind: AddKind::for_job(options.delay.unwrap_or(0), options.priority.unwrap_or(0)),
            name: name.to_owned(),
            custom_id: options.job_id.clone().unwrap_or_default(),
            timestamp: options.timestamp.unwrap_or_else(crate::clock::now_ms),
            data: self.store_data(data, limit)?,
            opts: crate::telemetry::trace::stamp_context(options.to_stored()),
            dedup_key: options
                .deduplication
                .as_ref()
                .map(|d| self.keys.dedup(&d.id)),
            group: options.group.as_ref().map(|g| {
                (
                    g.id.clone(),
                    g.priority.unwrap_or(0),
                    GroupKeys::new(&self.keys),
                )
            }),
            parent: options.parent.as_ref().and_then(|p| {
                let key = p.key();
                Some(ParentArgs {
                    dependencies: ChildKeys::of(&key).dependencies,
                    key,
                    descriptor: options.parent_descriptor()?,
                })
            }),
            #[cfg(feature = "codec")]
            blob: None,
        })
    }

    /// Moves the data of a job over the offload threshold to the blob store,
    /// announced in `{P}blobs` first (a producer dying after the write leaves
    /// a blob the sweep finds).
    #[cfg(feature = "codec")]
    async fn offload(&self, p: &mut Prepared) -> Result<()> {
        use crate::codec::offload;
        let Some(off) = &self.options.codec.offload else {
            return Ok(());
        };
        if p.data.len() <= off.threshold {
            return Ok(());
        }
        let key = offload::new_key();
        offload::refs::announce(&self.conn, &self.keys, &key, None).await?;
        p.data = offload::write(off, &key, &p.data).await?;
        p.blob = Some(key);
        Ok(())
    }

    /// Gives offloaded blobs their jobs. A failure here loses nothing: the
    /// sweep keeps an unowned blob for its grace, and a job whose blob was
    /// swept reads it as missing; so it is logged, not returned.
    #[cfg(feature = "codec")]
    async fn own_blobs<'p>(&self, added: impl Iterator<Item = (Option<&'p str>, &'p str)>) {
        let owned: Vec<(&str, &str)> = added
            .filter_map(|(blob, id)| blob.map(|b| (b, id)))
            .collect();
        if owned.is_empty() {
            return;
        }
        if let Err(e) = crate::codec::offload::refs::own(&self.conn, &self.keys, &owned).await {
            tracing::warn!(error = %e, blobs = owned.len(), "offloaded blobs not given their jobs");
        }
    }

    pub(super) fn add_call<'a>(&'a self, p: &'a Prepared) -> AnyAdd<'a> {
        if let Some((group, priority, groups)) = &p.group {
            return AnyAdd::Group(AddGroupJob {
                keys: &self.keys,
                groups,
                group,
                priority: *priority,
                args: p.add_args(self.keys.prefix_key()),
                data: &p.data,
                opts: &p.opts,
            });
        }
        AnyAdd::Plain(AddJob {
            keys: &self.keys,
            kind: p.kind,
            args: p.add_args(self.keys.prefix_key()),
            data: &p.data,
            opts: &p.opts,
        })
    }

    /// The id, or the typed refusal of a full group.
    fn added(group: Option<&str>, r: Result<GroupAdded>) -> Result<String> {
        match r? {
            GroupAdded::Added(id) => Ok(id),
            GroupAdded::Full { max_size } => Err(Error::GroupFull {
                group: group.unwrap_or_default().to_owned(),
                max_size,
            }),
        }
    }

    /// Whether an add may wait to go with others: a standard add (the
    /// kind addStandardJobs carries), on a handle that groups.
    fn coalesces(&self, p: &Prepared) -> bool {
        self.options.add_group > 1 && p.group.is_none() && p.kind == AddKind::Standard
    }

    /// Adds one job and returns its id. With a custom id that already exists the
    /// existing id is returned and nothing is stored (a `duplicated` event).
    /// With `options.parent` the job becomes a child of that existing job, as
    /// with Node's `queue.add(name, data, {parent})`: the parent waits for it,
    /// and a missing parent is `ParentJobNotExist` with nothing written.
    ///
    /// Concurrent standard adds on one handle (and its clones) share script
    /// calls once two are in flight, each with its own effects and answer
    /// ([`QueueOptions::add_group`](crate::QueueOptions::add_group)); a lone
    /// add is sent at once.
    pub async fn add(
        &self,
        name: &str,
        data: &impl Serialize,
        options: JobOptions,
    ) -> Result<String> {
        let span = crate::telemetry::trace::add_span(self.name(), name);
        async {
            #[allow(unused_mut)]
            let mut p = self.prepare(name, data, options)?;
            #[cfg(feature = "codec")]
            self.offload(&mut p).await?;
            #[cfg(feature = "codec")]
            let blob = p.blob.clone();
            let id = if self.coalesces(&p) {
                // A standard add has no group to be full.
                Self::added(None, self.add_coalesced(p).await)?
            } else {
                Self::added(p.group_name(), self.conn.call(&self.add_call(&p)).await)?
            };
            #[cfg(feature = "codec")]
            self.own_blobs(std::iter::once((blob.as_deref(), id.as_str())))
                .await;
            Ok(id)
        }
        .instrument(span)
        .await
    }

    /// Adds many jobs and returns their ids in order: in pipelined round
    /// trips of [`ADD_BULK_CHUNK`] jobs (one round trip for a smaller
    /// batch), so neither side holds a whole large batch at once and Redis
    /// serves other clients between the calls. Inside a chunk, runs of
    /// standard adds (no delay, priority or group) go [`ADD_BULK_GROUP`] to a
    /// call (addStandardJobs, each add with the effects and answer of its own
    /// addStandardJob); the others one per call. Every job is validated before
    /// anything is sent; a job the server refuses is reported while the
    /// others stay added. A lost connection stops before the next chunk: its
    /// error is the first one returned (see [`Queue::add_bulk_each`] for
    /// every job's own result).
    pub async fn add_bulk(&self, jobs: Vec<NewJob>) -> Result<Vec<String>> {
        self.add_bulk_each(jobs).await?.into_iter().collect()
    }

    /// [`Queue::add_bulk`] with each job's own result, in order: an id, the
    /// server's refusal, or — for the jobs of a chunk whose replies never
    /// came — [`Error::OutcomeUnknown`](crate::Error::OutcomeUnknown)
    /// (such a job may have been added). The jobs of the chunks after a
    /// connection failure are not sent; each answers
    /// [`Error::NotSent`](crate::Error::NotSent) with that failure's text.
    /// Bad input is the outer error, with nothing sent.
    pub async fn add_bulk_each(&self, jobs: Vec<NewJob>) -> Result<Vec<Result<String>>> {
        let span = crate::telemetry::trace::add_bulk_span(self.name(), jobs.len());
        async {
            #[allow(unused_mut)]
            let mut prepared = jobs
                .iter()
                .map(|j| self.prepare(&j.name, &j.data, j.options.clone()))
                .collect::<Result<Vec<_>>>()?;
            #[cfg(feature = "codec")]
            for p in prepared.iter_mut() {
                self.offload(p).await?;
            }
            let mut out: Vec<Result<String>> = Vec::with_capacity(prepared.len());
            let mut chunks = prepared.chunks(ADD_BULK_CHUNK);
            for chunk in chunks.by_ref() {
                let results: Vec<Result<String>> = chunk
                    .iter()
                    .zip(self.send_adds(chunk).await)
                    .map(|(p, r)| Self::added(p.group_name(), r))
                    .collect();
                #[cfg(feature = "codec")]
                self.own_blobs(chunk.iter().zip(&results).filter_map(|(p, r)| {
                    r.as_ref().ok().map(|id| (p.blob.as_deref(), id.as_str()))
                }))
                .await;
                let broken = results
                    .iter()
                    .find_map(|r| r.as_ref().err().filter(|e| e.is_connection()))
                    .map(|e| e.to_string());
                out.extend(results);
                if let Some(reason) = broken {
                    for _ in chunks.by_ref().flat_map(|c| c.iter()) {
                        out.push(Err(crate::error::Error::NotSent(reason.clone())));
                    }
                    break;
                }
            }
            Ok(out)
        }
        .instrument(span)
        .await
    }
}

/// Jobs per pipelined round trip of [`Queue::add_bulk`].
pub const ADD_BULK_CHUNK: usize = 1000;

/// Standard adds one addStandardJobs call of [`Queue::add_bulk`] carries
/// (the script takes up to 100): well under a millisecond of Redis.
pub const ADD_BULK_GROUP: usize = 50;

impl Queue {
    /// Sends `jobs` in one pipelined round trip ([`Queue::bulk_calls`]);
    /// each job's own answer, in order.
    pub(super) async fn send_adds(&self, jobs: &[Prepared]) -> Vec<Result<GroupAdded>> {
        let (calls, sizes) = self.bulk_calls(jobs);
        per_entry(self.conn.call_batch(&calls).await, &sizes)
    }

    /// The calls of one chunk, in order, and the jobs each covers: runs of
    /// standard adds (no group) go as addStandardJobs calls of up to
    /// [`ADD_BULK_GROUP`], every other add as its own call.
    fn bulk_calls<'a>(&'a self, chunk: &'a [Prepared]) -> (Vec<BulkAdd<'a>>, Vec<usize>) {
        let mut calls = Vec::new();
        let mut sizes = Vec::new();
        let mut run: Vec<AddJob<'a>> = Vec::new();
        let flush =
            |run: &mut Vec<AddJob<'a>>, calls: &mut Vec<BulkAdd<'a>>, sizes: &mut Vec<usize>| {
                if run.len() > 1 {
                    if let Ok(group) = AddStandardJobs::new(&self.keys, run) {
                        calls.push(BulkAdd::Many(group));
                        sizes.push(run.len());
                        run.clear();
                        return;
                    }
                }
                // One add, or a run above the byte bound: each its own call.
                for add in run.drain(..) {
                    calls.push(BulkAdd::One(AnyAdd::Plain(add)));
                    sizes.push(1);
                }
            };
        for p in chunk {
            match self.add_call(p) {
                AnyAdd::Plain(add) if add.kind == AddKind::Standard => {
                    run.push(add);
                    if run.len() == ADD_BULK_GROUP {
                        flush(&mut run, &mut calls, &mut sizes);
                    }
                }
                other => {
                    flush(&mut run, &mut calls, &mut sizes);
                    calls.push(BulkAdd::One(other));
                    sizes.push(1);
                }
            }
        }
        flush(&mut run, &mut calls, &mut sizes);
        (calls, sizes)
    }
}

/// One answer per job from the answers per call (`sizes[i]` jobs in call `i`).
fn per_entry(replies: Vec<Result<Vec<EntryAnswer>>>, sizes: &[usize]) -> Vec<Result<GroupAdded>> {
    let mut out = Vec::with_capacity(sizes.iter().sum());
    for (reply, &size) in replies.into_iter().zip(sizes) {
        match reply {
            Ok(answers) => out.extend(answers.into_iter().map(|a| {
                a.map_err(|refusal| match refusal {
                    EntryRefusal::Reply(e) => Error::from(e),
                    EntryRefusal::Redis(message) => Error::Redis(fred::error::Error::new(
                        fred::error::ErrorKind::Unknown,
                        message,
                    )),
                })
            })),
            Err(e) => {
                // The whole call failed: every job of it answers that error.
                for _ in 1..size {
                    out.push(Err(copy_error(&e)));
                }
                out.push(Err(e));
            }
        }
    }
    out
}

/// The same error for another job of a failed call.
fn copy_error(e: &Error) -> Error {
    match e {
        Error::Redis(source) => Error::Redis(source.clone()),
        Error::OutcomeUnknown { operation, source } => Error::OutcomeUnknown {
            operation,
            source: source.clone(),
        },
        other => Error::protocol("addStandardJobs", other.to_string()),
    }
}
