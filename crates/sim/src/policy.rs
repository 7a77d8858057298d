//! `--policy`: the placement settings a run can use, by name. The simulator compares
//! them on the same seeded workload; it decides nothing itself, each name only sets
//! fields of the engine's configuration — except `kernel-tiering`, which is not the
//! engine's: plain memcached with the kernel's page tiering (`kernel_tiering.rs`).

use engine::{EngineConfig, PlacementPolicy};

/// Who places the items of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyKind {
    /// The engine, under the placement policy `configure` sets.
    Engine,
    /// The engine DRAM-only, its pages placed by the kernel-tiering model.
    KernelTiering,
}

/// A placement setting: its name and what it changes in the engine's configuration.
#[derive(Clone, Copy)]
pub struct PolicySetting {
    pub name: &'static str,
    pub kind: PolicyKind,
    setting: Setting,
}

#[derive(Clone, Copy)]
enum Setting {
    /// One of the engine's placement policies.
    Placement(PlacementPolicy),
    /// The papers' "without dynamic relocation": items stay in the tier of their write.
    NoMigration,
    /// What a user would do instead: plain memcached, Linux moving hot 4 KiB pages.
    KernelTiering,
}

/// The settings that are not an engine policy, listed after the engine's.
const SIMULATOR_SETTINGS: [PolicySetting; 2] = [
    PolicySetting {
        name: "no-migration",
        kind: PolicyKind::Engine,
        setting: Setting::NoMigration,
    },
    PolicySetting {
        name: "kernel-tiering",
        kind: PolicyKind::KernelTiering,
        setting: Setting::KernelTiering,
    },
];

/// Every name `--policy` accepts, in the order the errors list them: the engine's
/// registry (`engine::PlacementPolicy::ALL`, so a new engine policy needs nothing here),
/// then the simulator's own settings.
pub fn all() -> impl Iterator<Item = PolicySetting> {
    PlacementPolicy::ALL
        .iter()
        .map(|&policy| PolicySetting {
            name: policy.name(),
            kind: PolicyKind::Engine,
            setting: Setting::Placement(policy),
        })
        .chain(SIMULATOR_SETTINGS)
}

/// What `--policy-compare` runs.
pub const COMPARE: [&str; 2] = ["dual-lru", "no-migration"];

impl PolicySetting {
    pub fn named(name: &str) -> Result<PolicySetting, UnknownPolicy> {
        all()
            .find(|p| p.name == name)
            .ok_or_else(|| UnknownPolicy(name.to_string()))
    }

    /// Policies for a list of names, each name possibly a comma list ("a,b"); blanks
    /// are skipped and a repeated name runs once.
    pub fn parse_list<S: AsRef<str>>(names: &[S]) -> Result<Vec<PolicySetting>, UnknownPolicy> {
        let mut policies: Vec<PolicySetting> = Vec::new();
        for name in names.iter().flat_map(|n| n.as_ref().split(',')) {
            let name = name.trim();
            if name.is_empty() || policies.iter().any(|p| p.name == name) {
                continue;
            }
            policies.push(PolicySetting::named(name)?);
        }
        Ok(policies)
    }

    /// Applies the policy to an engine configuration.
    pub fn configure(&self, config: &mut EngineConfig) {
        match self.setting {
            Setting::Placement(policy) => config.policy = policy,
            Setting::NoMigration => config.migration_enabled = false,
            Setting::KernelTiering => {}
        }
    }
}

impl std::fmt::Debug for PolicySetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl PartialEq for PolicySetting {
    fn eq(&self, other: &PolicySetting) -> bool {
        self.name == other.name
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct UnknownPolicy(pub String);

impl std::fmt::Display for UnknownPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let known: Vec<&str> = all().map(|p| p.name).collect();
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
        PolicySetting::named("dual-lru")
            .unwrap()
            .configure(&mut config);
        assert!(config.migration_enabled);
        PolicySetting::named("no-migration")
            .unwrap()
            .configure(&mut config);
        assert!(!config.migration_enabled);
        assert_eq!(
            PolicySetting::named("lru").unwrap_err().to_string(),
            format!(
                "unknown policy \"lru\" (known: {}, no-migration, kernel-tiering)",
                PlacementPolicy::NAMES.join(", ")
            )
        );
    }

    #[test]
    fn lists_split_on_commas_and_run_each_policy_once() {
        let names = |list: &[&str]| -> Vec<&'static str> {
            PolicySetting::parse_list(list)
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
        assert!(PolicySetting::parse_list(&["dual-lru,bogus"]).is_err());
    }
}
