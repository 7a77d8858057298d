//! Zipf-distributed ranks: P(rank = k) = k^-theta / H(n, theta) for k in 1..=n.
//!
//! Sampled exactly in O(1) by rejection-inversion (Hörmann and Derflinger, "Rejection-
//! inversion to generate variates from monotone discrete distributions", 1996), the
//! method of Apache Commons' `RejectionInversionZipfSampler` and of `rand_distr::Zipf`.
//! YCSB's own generator (Gray et al., 1994) is an approximation above rank 2; this one
//! is exact for every rank, which the frequency test checks.

use crate::rng::Rng;

#[derive(Clone, Debug, PartialEq)]
pub enum ZipfError {
    NoItems,
    BadTheta(f64),
}

impl std::fmt::Display for ZipfError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ZipfError::NoItems => f.write_str("a zipf distribution needs at least one item"),
            ZipfError::BadTheta(t) => {
                write!(f, "zipf theta must be a finite number >= 0, got {t}")
            }
        }
    }
}

impl std::error::Error for ZipfError {}

#[derive(Clone, Debug)]
pub struct Zipf {
    n: u64,
    theta: f64,
    h_integral_x1: f64,
    h_integral_n: f64,
    /// Ranks whose distance to the inverted point is at most this are accepted at once.
    squeeze: f64,
}

impl Zipf {
    pub fn new(n: u64, theta: f64) -> Result<Zipf, ZipfError> {
        if n == 0 {
            return Err(ZipfError::NoItems);
        }
        if !theta.is_finite() || theta < 0.0 {
            return Err(ZipfError::BadTheta(theta));
        }
        let mut z = Zipf {
            n,
            theta,
            h_integral_x1: 0.0,
            h_integral_n: 0.0,
            squeeze: 0.0,
        };
        z.h_integral_x1 = z.h_integral(1.5) - 1.0;
        z.h_integral_n = z.h_integral(n as f64 + 0.5);
        z.squeeze = 2.0 - z.h_integral_inverse(z.h_integral(2.5) - z.h(2.0));
        Ok(z)
    }

    pub fn items(&self) -> u64 {
        self.n
    }

    pub fn theta(&self) -> f64 {
        self.theta
    }

    /// A rank in 1..=n; rank 1 is the most popular.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        // The acceptance rate is above 0.9 for every theta, so a sample needs few
        // rounds; the bound only guards against a broken floating-point environment.
        for _ in 0..1_000 {
            let u = self.h_integral_n + rng.next_f64() * (self.h_integral_x1 - self.h_integral_n);
            let x = self.h_integral_inverse(u);
            let k = (x + 0.5).clamp(1.0, self.n as f64) as u64;
            let kf = k as f64;
            if kf - x <= self.squeeze || u >= self.h_integral(kf + 0.5) - self.h(kf) {
                return k;
            }
        }
        1
    }

    /// The exact probability of rank `k` (for tests and reports; O(n)).
    pub fn probability(&self, k: u64) -> f64 {
        if k == 0 || k > self.n {
            return 0.0;
        }
        let norm: f64 = (1..=self.n).map(|i| (i as f64).powf(-self.theta)).sum();
        (k as f64).powf(-self.theta) / norm
    }

    /// The probability mass of ranks 1..=k: the share of requests a cache holding
    /// exactly the k most popular keys would serve (O(n)).
    pub fn head_probability(&self, k: u64) -> f64 {
        let weight = |i: u64| (i as f64).powf(-self.theta);
        let norm: f64 = (1..=self.n).map(weight).sum();
        let head: f64 = (1..=k.min(self.n)).map(weight).sum();
        head / norm
    }

    /// h(x) = x^-theta.
    fn h(&self, x: f64) -> f64 {
        (-self.theta * x.ln()).exp()
    }

    /// An antiderivative of h: (x^(1-theta) - 1) / (1 - theta), ln(x) at theta = 1.
    fn h_integral(&self, x: f64) -> f64 {
        let log_x = x.ln();
        helper2((1.0 - self.theta) * log_x) * log_x
    }

    fn h_integral_inverse(&self, x: f64) -> f64 {
        // Rounding can push t just below -1, where log1p is undefined.
        let t = (x * (1.0 - self.theta)).max(-1.0);
        (helper1(t) * x).exp()
    }
}

/// log(1 + x) / x, continuous at 0.
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// (e^x - 1) / x, continuous at 0.
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_an_empty_range_and_bad_theta() {
        assert_eq!(Zipf::new(0, 0.99).unwrap_err(), ZipfError::NoItems);
        assert!(matches!(Zipf::new(10, -1.0), Err(ZipfError::BadTheta(_))));
        assert!(matches!(
            Zipf::new(10, f64::NAN),
            Err(ZipfError::BadTheta(_))
        ));
    }

    #[test]
    fn one_item_is_always_rank_one() {
        let z = Zipf::new(1, 0.99).unwrap();
        let mut rng = Rng::new(3, 0);
        for _ in 0..100 {
            assert_eq!(z.sample(&mut rng), 1);
        }
    }

    #[test]
    fn frequencies_match_theory_for_a_small_n() {
        const N: u64 = 20;
        const SAMPLES: u64 = 400_000;
        let zipf = Zipf::new(N, 0.99).unwrap();
        let mut rng = Rng::new(2024, 0);
        let mut counts = [0u64; N as usize];
        for _ in 0..SAMPLES {
            let k = zipf.sample(&mut rng);
            counts[(k - 1) as usize] += 1;
        }
        let mut chi2 = 0.0;
        for (i, &count) in counts.iter().enumerate() {
            let p = zipf.probability(i as u64 + 1);
            let expected = p * SAMPLES as f64;
            let sigma = (SAMPLES as f64 * p * (1.0 - p)).sqrt();
            assert!(
                (count as f64 - expected).abs() <= 5.0 * sigma,
                "rank {}: {count} samples, expected {expected:.0} +- {sigma:.0}",
                i + 1
            );
            chi2 += (count as f64 - expected).powi(2) / expected;
        }
        // 99.9th percentile of chi-square with 19 degrees of freedom is 43.8.
        assert!(chi2 < 43.8, "chi-square {chi2:.1}");
        // The head is where zipf differs from uniform: rank 1 over rank 2 is 2^0.99.
        let head_ratio = counts[0] as f64 / counts[1] as f64;
        assert!((1.90..2.08).contains(&head_ratio), "{head_ratio}");
    }

    #[test]
    fn head_probability_sums_the_top_ranks() {
        let zipf = Zipf::new(100, 0.99).unwrap();
        let top3: f64 = (1..=3).map(|k| zipf.probability(k)).sum();
        assert!((zipf.head_probability(3) - top3).abs() < 1e-12);
        assert!((zipf.head_probability(100) - 1.0).abs() < 1e-12);
        assert!((zipf.head_probability(1_000) - 1.0).abs() < 1e-12);
        assert_eq!(zipf.head_probability(0), 0.0);
    }

    #[test]
    fn samples_stay_in_range_for_several_thetas() {
        for theta in [0.0, 0.5, 0.99, 1.0, 1.5] {
            let z = Zipf::new(37, theta).unwrap();
            let mut rng = Rng::new(11, 0);
            for _ in 0..10_000 {
                let k = z.sample(&mut rng);
                assert!((1..=37).contains(&k), "theta {theta}: {k}");
            }
        }
    }
}
