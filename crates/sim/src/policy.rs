//! `--policy`: the placement settings a run can use, by name. The simulator compares
//! them on the same seeded workload; it decides nothing itself, each name only sets
//! fields of the engine's configuration.

use engine::{EngineConfig, PlacementPolicy};

/// A placement setting: its name and what it changes in the engine's configuration.
#[derive(Clone, Copy)]
pub struct Policy {
    pub name: &'static str,
    configure: fn(&mut EngineConfig),
}

/// Every name `--policy` accepts, in the order the errors list them. A new engine
/// policy is one more line here.
pub const POLICIES: &[Policy] = &[
    Policy {
        name: "dual-lru",
        configure: |c| c.policy = PlacementPolicy::DualLru,
    },
    Policy {
        name: "hotspot",
        configure: |c| c.policy = PlacementPolicy::Hotspot,
    },
    Policy {
        name: "hyperbolic",
        configure: |c| c.policy = PlacementPolicy::Hyperbolic,
    },
    Policy {
        name: "uniform",
        configure: |c| c.policy = PlacementPolicy::Uniform,
    },
    Policy {
        name: "two-level",
        configure: |c| c.policy = PlacementPolicy::TwoLevel,
    },
    // The papers' "without dynamic relocation": items stay in the tier of their write.
    Policy {
        name: "no-migration",
        configure: |c| c.migration_enabled = false,
    },
];

/// What `--policy-compare` runs.
pub const COMPARE: [&str; 2] = ["dual-lru", "no-migration"];

impl Policy {
    pub fn named(name: &str) -> Result<Policy, UnknownPolicy> {
        POLICIES
            .iter()
            .find(|p| p.name == name)
            .copied()
            .ok_or_else(|| UnknownPolicy(name.to_string()))
    }

    /// Policies for a list of names, each name possibly a comma list ("a,b"); blanks
    /// are skipped and a repeated name runs once.
    pub fn parse_list<S: AsRef<str>>(names: &[S]) -> Result<Vec<Policy>, UnknownPolicy> {
        let mut policies: Vec<Policy> = Vec::new();
        for name in names.iter().flat_map(|n| n.as_ref().split(',')) {
            let name = name.trim();
            if name.is_empty() || policies.iter().any(|p| p.name == name) {
                continue;
            }
            policies.push(Policy::named(name)?);
        }
        Ok(policies)
    }

    /// Applies the policy to an engine configuration.
    pub fn configure(&self, config: &mut EngineConfig) {
        (self.configure)(config);
    }
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl PartialEq for Policy {
    fn eq(&self, other: &Policy) -> bool {
        self.name == other.name
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct UnknownPolicy(pub String);

impl std::fmt::Display for UnknownPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let known: Vec<&str> = POLICIES.iter().map(|p| p.name).collect();
        write!(
            f,
            "unknown policy {:?} (known: {})",
            self.0,
            known.join(", ")
        )
    }
}

impl std::error::Error for UnknownPolicy {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_engine_settings() {
        let mut config = EngineConfig::default();
        Policy::named("dual-lru").unwrap().configure(&mut config);
        assert!(config.migration_enabled);
        Policy::named("no-migration")
            .unwrap()
            .configure(&mut config);
        assert!(!config.migration_enabled);
        assert_eq!(
            Policy::named("lru").unwrap_err().to_string(),
            "unknown policy \"lru\" (known: dual-lru, hotspot, hyperbolic, uniform, two-level, no-migration)"
        );
    }

    #[test]
    fn lists_split_on_commas_and_run_each_policy_once() {
        let names = |list: &[&str]| -> Vec<&'static str> {
            Policy::parse_list(list)
                .unwrap()
                .iter()
                .map(|p| p.name)
                .collect()
        };
        assert_eq!(
            names(&["no-migration,dual-lru"]),
            ["no-migration", "dual-lru"]
        );
        assert_eq!(
            names(&["dual-lru", " no-migration ", "dual-lru,"]),
            ["dual-lru", "no-migration"]
        );
        assert_eq!(names(&COMPARE), ["dual-lru", "no-migration"]);
        assert!(Policy::parse_list(&["dual-lru,bogus"]).is_err());
    }
}
