//! The synthetic processors of `echomq work` (`sleep:MS | echo | fail |
//! fail-rate:P | cpu:MS`), for smoke tests, load tests and the demo.

use std::time::{Duration, Instant};

use echomq::worker::{JobContext, ProcessError};
use serde_json::{json, Value};

/// What the synthetic processor does with each job.
#[derive(Clone, Debug)]
pub enum Synthetic {
    /// Sleep this long, then complete with `null`.
    Sleep(Duration),
    /// Complete with the job's data.
    Echo,
    /// Fail every attempt.
    Fail,
    /// Fail an attempt with this probability, else complete.
    FailRate(f64),
    /// Burn this much CPU, then complete.
    Cpu(Duration),
}

impl std::str::FromStr for Synthetic {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, arg) = s.split_once(':').unwrap_or((s, ""));
        let ms = |a: &str| {
            a.parse::<u64>()
                .map(Duration::from_millis)
                .map_err(|_| format!("{kind}: {a:?} is not a number of ms"))
        };
        match kind {
            "sleep" => Ok(Synthetic::Sleep(ms(arg)?)),
            "echo" => Ok(Synthetic::Echo),
            "fail" => Ok(Synthetic::Fail),
            "fail-rate" => match arg.parse::<f64>() {
                Ok(p) if (0.0..=1.0).contains(&p) => Ok(Synthetic::FailRate(p)),
                _ => Err(format!("fail-rate: {arg:?} is not a probability in 0..=1")),
            },
            "cpu" => Ok(Synthetic::Cpu(ms(arg)?)),
            _ => Err(format!(
                "unknown processor {s:?} (sleep:MS, echo, fail, fail-rate:P, cpu:MS)"
            )),
        }
    }
}

pub async fn run_synthetic(kind: Synthetic, ctx: JobContext) -> Result<Value, ProcessError> {
    match kind {
        Synthetic::Sleep(d) => {
            tokio::time::sleep(d).await;
            Ok(Value::Null)
        }
        Synthetic::Echo => Ok(ctx.job().data.clone()),
        Synthetic::Fail => Err(ProcessError::failed("synthetic failure")),
        Synthetic::FailRate(p) => {
            if rand_unit() < p {
                Err(ProcessError::failed("synthetic failure"))
            } else {
                Ok(Value::Null)
            }
        }
        Synthetic::Cpu(d) => {
            let until = Instant::now() + d;
            let mut x = 0u64;
            while Instant::now() < until {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            Ok(json!(x & 1))
        }
    }
}

fn rand_unit() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded per instance: enough entropy for a synthetic fail rate.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}
