//! The request mix of the signature curves: what a mirror or artifact
//! server answers. Most requests are small (manifests, indexes, checksums,
//! signatures, thumbnails: 1-16 KiB, answered from memory by the hit lane);
//! some are medium (packages, chunks, images: 256 KiB); a few are large
//! downloads (layers, shards: 16 MiB), and those carry most of the bytes.
//! By requests 85 / 14 / 1 %; by bytes about 3 / 17 / 80 %.

use rand::Rng;

/// One object of the mix: its name under the served directory and size.
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    pub name: String,
    pub size: u64,
}

/// A class of objects and its share of requests.
#[derive(Debug, Clone, PartialEq)]
pub struct Class {
    pub label: &'static str,
    pub share: f64,
    pub objects: Vec<Object>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Mix {
    pub classes: Vec<Class>,
}

impl Mix {
    /// The mix above: 64 small objects of 1-16 KiB, 16 of 256 KiB, 2 of 16 MiB.
    pub fn content_server() -> Mix {
        let objects = |prefix: &str, n: usize, size: &dyn Fn(usize) -> u64| {
            (0..n).map(|i| Object { name: format!("{prefix}-{i:02}.bin"), size: size(i) }).collect()
        };
        Mix {
            classes: vec![
                Class { label: "small", share: 0.85, objects: objects("small", 64, &|i| (1 + i as u64 % 16) << 10) },
                Class { label: "medium", share: 0.14, objects: objects("medium", 16, &|_| 256 << 10) },
                Class { label: "large", share: 0.01, objects: objects("large", 2, &|_| 16 << 20) },
            ],
        }
    }

    pub fn objects(&self) -> impl Iterator<Item = &Object> {
        self.classes.iter().flat_map(|c| &c.objects)
    }

    /// Mean body bytes per request.
    pub fn mean_bytes(&self) -> f64 {
        self.classes
            .iter()
            .map(|c| c.share * c.objects.iter().map(|o| o.size as f64).sum::<f64>() / c.objects.len() as f64)
            .sum()
    }

    /// The simple model's response time added per unit of added
    /// server-to-client latency: each request waits one round trip per
    /// slow-start round its body needs from a fresh initial window (TCP's
    /// 10 segments of 1448 bytes, doubling each round). An upper bound:
    /// a kept connection whose window is already open needs fewer.
    pub fn model_latency_slope(&self) -> f64 {
        self.classes
            .iter()
            .map(|c| {
                c.share * c.objects.iter().map(|o| f64::from(slow_start_rounds(o.size))).sum::<f64>()
                    / c.objects.len() as f64
            })
            .sum()
    }

    /// A request: a class by its share, then one of its objects uniformly;
    /// the class's index and the object.
    pub fn pick(&self, rng: &mut impl Rng) -> (usize, &Object) {
        let mut u: f64 = rng.random();
        for (i, class) in self.classes.iter().enumerate() {
            if u < class.share {
                return (i, &class.objects[rng.random_range(0..class.objects.len())]);
            }
            u -= class.share;
        }
        let last = self.classes.len() - 1;
        let objects = &self.classes[last].objects;
        (last, &objects[rng.random_range(0..objects.len())])
    }
}

/// Round trips to deliver `bytes` from TCP's initial window of 10
/// segments, the window doubling each round (no loss).
pub fn slow_start_rounds(bytes: u64) -> u32 {
    const MSS: u64 = 1448;
    let (mut sent, mut window, mut rounds) = (0u64, 10 * MSS, 0);
    while sent < bytes.max(1) {
        sent += window;
        window *= 2;
        rounds += 1;
    }
    rounds
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn shares_add_up_and_large_downloads_carry_most_bytes() {
        let mix = Mix::content_server();
        let total: f64 = mix.classes.iter().map(|c| c.share).sum();
        assert!((total - 1.0).abs() < 1e-9, "{total}");
        let large = mix.classes.iter().find(|c| c.label == "large").unwrap();
        let large_bytes = large.share * (16 << 20) as f64;
        let share = large_bytes / mix.mean_bytes();
        assert!((0.75..0.85).contains(&share), "large downloads carry {share} of bytes");
    }

    #[test]
    fn slow_start_takes_a_round_per_doubling() {
        assert_eq!(slow_start_rounds(1024), 1);
        assert_eq!(slow_start_rounds(14_480), 1);
        assert_eq!(slow_start_rounds(14_481), 2);
        // 10 + 20 + 40 + 80 + 160 segments of 1448 bytes: 448,880 bytes.
        assert_eq!(slow_start_rounds(256 << 10), 5);
        assert_eq!(slow_start_rounds(16 << 20), 11);
        let slope = Mix::content_server().model_latency_slope();
        // Small ones take one round (over 14 KiB: two), medium five, large eleven.
        assert!((1.7..1.8).contains(&slope), "{slope}");
    }

    #[test]
    fn picks_follow_the_shares() {
        let mix = Mix::content_server();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let n = 100_000;
        let small = (0..n)
            .filter(|_| {
                let (class, object) = mix.pick(&mut rng);
                assert!(object.name.starts_with(mix.classes[class].label));
                class == 0
            })
            .count();
        let got = small as f64 / n as f64;
        assert!((got - 0.85).abs() < 0.01, "{got}");
    }
}
