//! Jittered exponential backoff for the reflector (client-go's
//! `wait.Backoff` with jitter 1.0: each delay is d..2d).

use std::time::Duration;

/// Delays doubling from `initial` to `max`, each stretched by a random 0–100 %.
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
    rng: u64,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        // Seeded from the clock and this object's address: only jitter, not crypto.
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x9E37_79B9_7F4A_7C15);
        Backoff {
            initial,
            max,
            next: initial,
            rng: seed | 1,
        }
    }

    /// The next delay: the current step plus up to 100 % jitter, capped at `max`.
    pub fn next_delay(&mut self) -> Duration {
        let step = self.next;
        self.next = (self.next * 2).min(self.max);
        (step + step.mul_f64(self.unit())).min(self.max)
    }

    /// Back to `initial` after a success.
    pub fn reset(&mut self) {
        self.next = self.initial;
    }

    /// A pseudo-random number in [0, 1) (xorshift64*).
    pub fn unit(&mut self) -> f64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_with_jitter_and_cap() {
        let mut b = Backoff::new(Duration::from_millis(800), Duration::from_secs(30));
        let steps: [f64; 8] = [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0];
        for step in steps {
            let d = b.next_delay().as_secs_f64();
            assert!(
                d >= step.min(30.0) - 1e-9 && d <= (2.0 * step).min(30.0) + 1e-9,
                "{d} for step {step}"
            );
        }
        b.reset();
        assert!(b.next_delay() < Duration::from_millis(1600));
    }
}
