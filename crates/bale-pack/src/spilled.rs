//! The plan of a large sorted pack, streamed from a [`Spill`]: what
//! [`crate::plan::group`] and [`crate::plan::apply_labels`] decide in
//! memory, decided in one pass over the merged runs (the count, the class
//! folders, the bad files' samples), then the samples again, one at a
//! time, labelled, cut to the part and stat'ed in chunks.
//!
//! It serves directory labels and none (a label CSV, a shuffle and an
//! append plan in memory). The samples, their order and every byte written
//! are those of the plan in memory.

use std::collections::{HashMap, HashSet, VecDeque};
use std::ops::Range;
use std::path::PathBuf;

use crate::discover::{BadFound, Found, Ignored};
use crate::error::{PackError, Result};
use crate::options::LabelMode;
use crate::plan::{Grouped, ListingHash, PlannedSample, stat_all};
use crate::spill::Spill;

/// Samples stat'ed together on the pool.
const STAT_CHUNK: usize = 4096;
/// Samples planned ahead of the writer.
pub(crate) const AHEAD: usize = 2 * STAT_CHUNK;

/// What the first pass decided.
#[derive(Debug)]
pub(crate) struct SpillPlan {
    /// Samples planned (outside-class ones dropped), whole listing.
    pub count: usize,
    /// Directory labels: the label of each class folder met, by the order met.
    label_of: Option<Vec<u32>>,
    /// The class folders' names, in the order met.
    names: Vec<String>,
    /// Keyed bad inputs, first one of each sample.
    bad: HashMap<String, PackError>,
    /// `dir` or `none`.
    pub mode: &'static str,
    /// Bytes of the samples planned, when the first pass stat'ed them.
    pub bytes: Option<u64>,
    /// Class names, index = label.
    pub classes: Option<Vec<String>>,
}

/// The class folder of a key (its first part) when it has more than one part.
fn class_of(key: &str) -> (usize, Option<&str>) {
    let parts = 1 + key.bytes().filter(|&b| b == b'/').count();
    (
        parts,
        (parts > 1).then(|| key.split('/').next().unwrap_or("")),
    )
}

impl SpillPlan {
    /// The first pass: counts samples, finds the class folders and the
    /// bad files' samples; the bad files of no sample are returned in order
    /// (reported by part 0). Files outside any class (directory labels) go
    /// to `ignored`; `watch` sees every file.
    pub fn new(
        spill: &mut Spill,
        mode: &LabelMode,
        bad: Vec<BadFound>,
        ignored: &mut Ignored,
        mut watch: Option<&mut dyn FnMut(&Found)>,
        stat_on: Option<&rayon::ThreadPool>,
    ) -> Result<(Self, Vec<PackError>)> {
        let wanted: HashSet<String> = bad.iter().filter_map(|b| b.key.clone()).collect();
        let mut met: HashSet<String> = HashSet::new();
        let mut names: Vec<String> = Vec::new();
        let mut ids: HashMap<String, u32> = HashMap::new();
        let mut cls: Option<PathBuf> = None;
        let (mut total, mut kept, mut all_two) = (0usize, 0usize, true);
        // Bytes of every sample, and of those in a class folder (the
        // samples a bad file dooms are not stat'ed, as in memory).
        let (mut bytes_all, mut bytes_kept) = (0u64, 0u64);
        let mut chunk: Vec<(PlannedSample, bool)> = Vec::new();
        let mut stat = |chunk: &mut Vec<(PlannedSample, bool)>| {
            let Some(pool) = stat_on else { return };
            let mut samples: Vec<PlannedSample> = Vec::with_capacity(chunk.len());
            let mut kept = Vec::with_capacity(chunk.len());
            for (s, k) in chunk.drain(..) {
                samples.push(s);
                kept.push(k);
            }
            pool.install(|| stat_all(&mut samples));
            for (s, k) in samples.iter().zip(kept) {
                let b: u64 = s.members.iter().map(|m| m.size).sum();
                bytes_all += b;
                if k {
                    bytes_kept += b;
                }
            }
        };
        let files = spill.merged()?.inspect(|f| {
            if let (Some(w), Ok(f)) = (watch.as_deref_mut(), f) {
                w(f);
            }
        });
        for s in Grouped::new(files) {
            let s = s?;
            total += 1;
            let doomed = wanted.contains(&s.key);
            if doomed {
                met.insert(s.key.clone());
            }
            let (parts, class) = class_of(&s.key);
            if !matches!(mode, LabelMode::None) {
                all_two &= parts == 2;
                if let Some(name) = class
                    && names.last().is_none_or(|n| n != name)
                    && !ids.contains_key(name)
                {
                    ids.insert(name.to_owned(), names.len() as u32);
                    names.push(name.to_owned());
                }
                if cls.is_none()
                    && let Some(m) = s.members.iter().find(|m| m.ext == "cls")
                {
                    cls = Some(m.path.clone());
                }
                if parts >= 2 {
                    kept += 1;
                } else if matches!(mode, LabelMode::Dir) {
                    for m in &s.members {
                        ignored.outside_class.add(&m.path);
                    }
                }
            }
            if stat_on.is_some() && !doomed {
                chunk.push((s, parts >= 2));
                if chunk.len() >= STAT_CHUNK {
                    stat(&mut chunk);
                }
            }
        }
        stat(&mut chunk);
        let mut by_key = HashMap::new();
        let mut orphans = Vec::new();
        for b in bad {
            match b.key {
                Some(k) if met.contains(&k) => {
                    by_key.entry(k).or_insert(b.error);
                }
                _ => orphans.push(b.error),
            }
        }
        let mut plan = SpillPlan {
            count: total,
            label_of: None,
            names: Vec::new(),
            bad: by_key,
            mode: "none",
            classes: None,
            bytes: stat_on.map(|_| bytes_all),
        };
        let dir = match mode {
            LabelMode::None => false,
            LabelMode::Auto => total > 0 && all_two && names.len() >= 2,
            LabelMode::Dir => true,
            LabelMode::Csv(_) => unreachable!("a label CSV plans in memory"),
        };
        if !dir {
            return Ok((plan, orphans));
        }
        if let Some(path) = cls {
            return Err(PackError::LabelConflict { path });
        }
        // Byte-wise order, as the names of the class folders sort.
        let mut order: Vec<u32> = (0..names.len() as u32).collect();
        order.sort_by(|&a, &b| names[a as usize].cmp(&names[b as usize]));
        let mut label_of = vec![0u32; names.len()];
        for (label, &id) in order.iter().enumerate() {
            label_of[id as usize] = label as u32;
        }
        plan.classes = Some(order.iter().map(|&id| names[id as usize].clone()).collect());
        plan.names = names;
        plan.label_of = Some(label_of);
        plan.mode = "dir";
        plan.count = kept;
        plan.bytes = stat_on.map(|_| bytes_kept);
        Ok((plan, orphans))
    }

    /// The samples again, labelled, with their bad files' errors: the
    /// listing hashed into `hash` when given, those in `range` yielded,
    /// stat'ed in chunks on `pool`.
    pub fn samples<'a>(
        &'a mut self,
        spill: &'a mut Spill,
        range: Range<usize>,
        hash: Option<&'a mut ListingHash>,
        pool: &'a rayon::ThreadPool,
    ) -> Result<Samples<'a>> {
        let ids: HashMap<String, u32> = self
            .names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i as u32))
            .collect();
        Ok(Samples {
            grouped: Box::new(Grouped::new(spill.merged()?)),
            plan: self,
            ids,
            range,
            hash,
            at: 0,
            ready: VecDeque::new(),
            pool,
            done: false,
        })
    }
}

/// The planned samples of a [`SpillPlan`], in order.
pub(crate) struct Samples<'a> {
    grouped: Box<dyn Iterator<Item = Result<PlannedSample>> + Send + 'a>,
    plan: &'a mut SpillPlan,
    ids: HashMap<String, u32>,
    range: Range<usize>,
    hash: Option<&'a mut ListingHash>,
    /// Position in the whole listing of the next sample labelled.
    at: usize,
    ready: VecDeque<PlannedSample>,
    pool: &'a rayon::ThreadPool,
    done: bool,
}

impl Samples<'_> {
    /// The next sample of the whole listing, labelled.
    fn labelled(&mut self) -> Option<Result<PlannedSample>> {
        loop {
            let mut s = match self.grouped.next()? {
                Ok(s) => s,
                Err(e) => return Some(Err(e)),
            };
            if let Some(e) = self.plan.bad.remove(&s.key) {
                s.fail = Some(e);
            }
            if let Some(label_of) = &self.plan.label_of {
                let (_, class) = class_of(&s.key);
                let Some(name) = class else { continue };
                s.label = self.ids.get(name).map(|&id| label_of[id as usize]);
            }
            return Some(Ok(s));
        }
    }

    /// Fills `ready` with the next chunk of the range, stat'ed.
    fn fill(&mut self) -> Result<()> {
        let mut chunk = Vec::with_capacity(STAT_CHUNK);
        while chunk.len() < STAT_CHUNK {
            let Some(s) = self.labelled() else {
                break;
            };
            let s = s?;
            if let Some(h) = self.hash.as_deref_mut() {
                h.add(&s);
            }
            let at = self.at;
            self.at += 1;
            if self.range.contains(&at) {
                chunk.push(s);
            } else if at >= self.range.end && self.hash.is_none() {
                break;
            }
        }
        self.pool.install(|| stat_all(&mut chunk));
        self.ready.extend(chunk);
        Ok(())
    }
}

impl Iterator for Samples<'_> {
    type Item = Result<PlannedSample>;

    fn next(&mut self) -> Option<Result<PlannedSample>> {
        if self.ready.is_empty() && !self.done {
            if let Err(e) = self.fill() {
                self.done = true;
                return Some(Err(e));
            }
            if self.ready.is_empty() {
                self.done = true;
            }
        }
        self.ready.pop_front().map(Ok)
    }
}
