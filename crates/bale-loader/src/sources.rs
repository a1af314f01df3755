//! What a loader reads from: one dataset, or a mix of several
//! ([`bale_reader::mix`]) with their weights.
//!
//! The engine asks a [`Sources`] for sample `id` of a slot. For one dataset
//! `id` is the sample's index; for a mix it is the sample's place in the
//! datasets laid end to end (`offset_s + index`, `offset_s` the samples of
//! the sources before `s`), so that one `u64` names a (source, index) pair
//! and the engine stays the one of a single dataset. [`Sources::locate`]
//! splits it again.
//!
//! A mix's epoch is [`bale_reader::mix::Mix::list`]'s list of (source,
//! index) pairs cut by [`bale_reader::mix::MixList::positions`]: the very
//! arithmetic of `bale.Mix`, so a loader at rank `r` of `W` reads what a
//! `Mix` at rank `r` of `W` with one worker yields, in that order.

use bale_reader::mix::{Mix, MixPlan};
use bale_reader::resume::Place;
use bale_reader::{Dataset, OrderIter, Partition, ReaderError, Sample};

use crate::error::{LoaderError, Result};
use crate::options::Order;

/// The datasets of a loader.
#[derive(Debug, Clone)]
pub(crate) enum Sources {
    /// One dataset: ids are its indices.
    One(Dataset),
    /// A weighted mix.
    Many(Box<Many>),
}

/// A weighted mix of datasets.
#[derive(Debug, Clone)]
pub(crate) struct Many {
    pub datasets: Vec<Dataset>,
    /// The id of each source's first sample, and the total at the end.
    pub offsets: Vec<u64>,
    pub mix: Mix,
    /// Per source, each class index's label in one class list (None:
    /// labels stay per source).
    pub labels: Option<Vec<Vec<i64>>>,
}

/// The ids of an epoch's slots, in order.
pub(crate) enum Ids {
    /// A dataset's plan.
    Order(OrderIter),
    /// A mix's positions, already as ids.
    List(std::vec::IntoIter<u64>),
}

impl Iterator for Ids {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        match self {
            Ids::Order(o) => o.next(),
            Ids::List(l) => l.next(),
        }
    }
}

impl Sources {
    /// The first (or only) dataset.
    pub fn first(&self) -> &Dataset {
        match self {
            Sources::One(ds) => ds,
            Sources::Many(m) => &m.datasets[0],
        }
    }

    /// Ids there are: the dataset's samples, or all the sources' together.
    pub fn len(&self) -> u64 {
        match self {
            Sources::One(ds) => ds.len(),
            Sources::Many(m) => m.offsets[m.offsets.len() - 1],
        }
    }

    /// (source, index in it) of `id` (`id < len`).
    pub fn locate(&self, id: u64) -> (usize, u64) {
        match self {
            Sources::One(_) => (0, id),
            Sources::Many(m) => {
                let s = m.offsets.partition_point(|&o| o <= id) - 1;
                (s, id - m.offsets[s])
            }
        }
    }

    /// The id of sample `index` of source `source`.
    ///
    /// # Errors
    /// [`LoaderError::Index`] outside the source; [`LoaderError::Option`]
    /// for a source there is not.
    pub fn id(&self, source: usize, index: u64) -> Result<u64> {
        let (first, len) = match self {
            Sources::One(ds) if source == 0 => (0, ds.len()),
            Sources::Many(m) if source + 1 < m.offsets.len() => {
                (m.offsets[source], m.offsets[source + 1] - m.offsets[source])
            }
            _ => {
                return Err(LoaderError::Option {
                    name: "source",
                    what: format!("{source} is not a source of the loader"),
                });
            }
        };
        if index >= len {
            return Err(LoaderError::Index { index, len });
        }
        Ok(first + index)
    }

    fn dataset(&self, id: u64) -> (&Dataset, u64) {
        match self {
            Sources::One(ds) => (ds, id),
            Sources::Many(m) => {
                let (s, i) = self.locate(id);
                (&m.datasets[s], i)
            }
        }
    }

    /// The sample `id` names (its [`Sample::index`] is its index in its dataset).
    pub fn get(&self, id: u64) -> std::result::Result<Sample, ReaderError> {
        let (ds, i) = self.dataset(id);
        ds.get(i)
    }

    /// [`Dataset::check_unchanged`] of the sample `id` names.
    pub fn check_unchanged(&self, id: u64) -> std::result::Result<(), ReaderError> {
        let (ds, i) = self.dataset(id);
        ds.check_unchanged(i)
    }

    /// Maps the class label of sample `id` onto the mix's one class list.
    ///
    /// # Errors
    /// A label the source's class list does not have, naming the source.
    pub fn map_label(&self, id: u64, label: &mut i64) -> std::result::Result<(), String> {
        let Sources::Many(m) = self else {
            return Ok(());
        };
        let Some(maps) = &m.labels else {
            return Ok(());
        };
        let (s, _) = self.locate(id);
        let map = &maps[s];
        match usize::try_from(*label).ok().and_then(|l| map.get(l)) {
            Some(&to) => {
                *label = to;
                Ok(())
            }
            None => Err(format!(
                "label {label} of source {s} ({}) is not one of its {} class names, so it has no place in the merged class list",
                m.datasets[s].dir().display(),
                map.len()
            )),
        }
    }

    /// The mix's list plan for `order` and `epoch`.
    fn mix_plan(order: Order, seed: u64, epoch: u64) -> Result<MixPlan> {
        match order {
            Order::Sequential => Ok(MixPlan::Sequential { epoch }),
            Order::Shuffled => Ok(MixPlan::Shuffled { seed, epoch }),
            Order::ShardShuffled(_) => Err(LoaderError::Option {
                name: "order",
                what: "a mix of datasets is read \"sequential\" or \"shuffled\", not \"shard_shuffled\""
                    .into(),
            }),
        }
    }

    /// Checks that `order` can read these sources.
    pub fn check_order(&self, order: Order) -> Result<()> {
        match self {
            Sources::One(_) => Ok(()),
            Sources::Many(m) => {
                let plan = Self::mix_plan(order, 0, 0)?;
                if matches!(plan, MixPlan::Sequential { .. })
                    && m.mix.sampling() == bale_reader::mix::Sampling::WithReplacement
                {
                    return Err(LoaderError::Option {
                        name: "replacement",
                        what: "draws with replacement are random: shuffle the mix".into(),
                    });
                }
                Ok(())
            }
        }
    }

    /// The length of a mix's epoch list (all ranks').
    pub fn mix_len(&self) -> Option<u64> {
        match self {
            Sources::One(_) => None,
            Sources::Many(m) => Some(m.mix.len()),
        }
    }

    /// The ids of a mix's epoch that `partition` reads at `place`, in order.
    ///
    /// # Errors
    /// An order a mix cannot have; an invalid partition or place.
    pub fn mix_ids(
        m: &Many,
        order: Order,
        seed: u64,
        epoch: u64,
        partition: Partition,
        place: &Place,
    ) -> Result<Vec<u64>> {
        let list = m.mix.list(Self::mix_plan(order, seed, epoch)?)?;
        let positions = list.positions(partition, place)?;
        Ok(positions
            .into_iter()
            .map(|p| {
                let (s, i) = list.get(p);
                m.offsets[s] + i
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_name_a_source_and_an_index() {
        let dir = tempfile::tempdir().unwrap();
        let mk = |name: &str, n: u32| {
            let d = dir.path().join(name);
            std::fs::create_dir(&d).unwrap();
            let mut w = bale_format::ShardFileWriter::create(
                &d,
                "shard-000000.tar",
                bale_format::Compression::None,
                0,
            )
            .unwrap();
            for i in 0..n {
                w.writer()
                    .write_sample(
                        &format!("{i:04}"),
                        &[bale_format::Member {
                            ext: "cls",
                            data: b"0",
                        }],
                    )
                    .unwrap();
            }
            let by = bale_format::CreatedBy {
                tool: "test".into(),
                version: "0".into(),
                command: "test".into(),
                options: Default::default(),
            };
            bale_format::Manifest::new(vec![w.finish().unwrap()], None, by)
                .write(&d)
                .unwrap();
            Dataset::open(&d).unwrap()
        };
        let (a, b) = (mk("a", 5), mk("b", 3));
        let mix = Mix::new(
            &[5, 3],
            &[1.0, 1.0],
            None,
            bale_reader::mix::Sampling::WithoutReplacement,
        )
        .unwrap();
        let s = Sources::Many(Box::new(Many {
            datasets: vec![a, b],
            offsets: vec![0, 5, 8],
            mix,
            labels: Some(vec![vec![10, 11], vec![12]]),
        }));
        assert_eq!(s.len(), 8);
        assert_eq!(s.locate(4), (0, 4));
        assert_eq!(s.locate(5), (1, 0));
        assert_eq!(s.locate(7), (1, 2));
        assert_eq!(s.id(1, 2).unwrap(), 7);
        assert!(s.id(1, 3).is_err());
        assert!(s.id(2, 0).is_err());
        assert_eq!(s.get(6).unwrap().index(), 1);
        let mut l = 1;
        s.map_label(0, &mut l).unwrap();
        assert_eq!(l, 11);
        let mut l = 1;
        let e = s.map_label(5, &mut l).unwrap_err();
        assert!(e.contains("label 1 of source 1"), "{e}");
        assert!(s.check_order(Order::ShardShuffled(8)).is_err());
    }
}
