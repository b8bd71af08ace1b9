//! Dead letters for a scrape: `echomq_dead_letters{queue, source, class}`,
//! the dead letters a dead-letter queue holds by the queue they came from
//! and reason class (docs/operations.md §Dead letters). One bounded read per
//! queue (the `{D}dlq:counts` hash: sources × five classes), read at each
//! scrape like [`super::queue_state`].

use crate::error::Result;
use crate::queue::DeadLetters;
use crate::telemetry::queue_state::escape;

/// One dead-letter queue's numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterSample {
    /// The dead-letter queue's name.
    pub queue: String,
    /// `((source, class), count)`.
    counts: Vec<((String, String), u64)>,
}

impl DeadLetters<'_> {
    /// Reads the numbers [`render`] writes: one call.
    pub async fn sample(self) -> Result<DeadLetterSample> {
        Ok(DeadLetterSample {
            queue: self.queue.name().to_owned(),
            counts: self.counts().await?,
        })
    }
}

/// `echomq_dead_letters{queue, source, class}`; queues without dead letters
/// write nothing.
pub fn render(samples: &[DeadLetterSample]) -> String {
    let samples: Vec<&DeadLetterSample> = samples.iter().filter(|s| !s.counts.is_empty()).collect();
    if samples.is_empty() {
        return String::new();
    }
    let mut lines = vec![
        "# HELP echomq_dead_letters Dead letters held, by source queue and reason class".to_owned(),
        "# TYPE echomq_dead_letters gauge".to_owned(),
    ];
    for s in samples {
        for ((source, class), n) in &s.counts {
            lines.push(format!(
                "echomq_dead_letters{{queue=\"{}\", source=\"{}\", class=\"{}\"}} {n}",
                escape(&s.queue),
                escape(source),
                escape(class)
            ));
        }
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_one_series_per_source_and_class() {
        let s = DeadLetterSample {
            queue: "q-dead".into(),
            counts: vec![(("q".into(), "timeout".into()), 3)],
        };
        let text = render(&[s]);
        assert!(text
            .contains("echomq_dead_letters{queue=\"q-dead\", source=\"q\", class=\"timeout\"} 3"));
        assert_eq!(render(&[]), "");
    }
}
