//! Device specs as users write them: `[pci:]DOMAIN:BUS:DEVICE.FUNCTION[,iommu=MODE]`, the
//! shape DPDK's `-a` allow-list takes (an address, then comma-separated options).

use super::{IommuMode, PciAddress, VfioError};
use std::fmt;
use std::str::FromStr;

/// A parsed device spec: which PCI function, and how to reach its memory through the IOMMU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceSpec {
    /// The function's address.
    pub address: PciAddress,
    /// IOMMU arrangement (`auto` unless `,iommu=` says otherwise).
    pub iommu: IommuMode,
}

impl FromStr for DeviceSpec {
    type Err = VfioError;

    /// `0000:06:00.0`, `06:00.0`, `pci:0000:06:00.0`, `0000:06:00.0,iommu=type1`.
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let bad = |reason: String| VfioError::BadSpec {
            input: input.to_string(),
            reason,
        };
        let trimmed = input.trim();
        let body = trimmed.strip_prefix("pci:").unwrap_or(trimmed);
        let mut parts = body.split(',');
        let address = PciAddress::parse(parts.next().unwrap_or_default())?;
        let mut iommu = None;
        for option in parts {
            let (key, value) = option
                .split_once('=')
                .ok_or_else(|| bad(format!("option {option:?} is not KEY=VALUE")))?;
            match key.trim() {
                "iommu" if iommu.is_some() => return Err(bad("iommu given twice".into())),
                "iommu" => iommu = Some(value.parse::<IommuMode>()?),
                other => return Err(bad(format!("unknown option {other:?} (known: iommu)"))),
            }
        }
        Ok(DeviceSpec {
            address,
            iommu: iommu.unwrap_or(IommuMode::Auto),
        })
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.iommu {
            IommuMode::Auto => write!(f, "{}", self.address),
            IommuMode::Type1 => write!(f, "{},iommu=type1", self.address),
            IommuMode::Iommufd => write!(f, "{},iommu=iommufd", self.address),
            IommuMode::NoIommu => write!(f, "{},iommu=noiommu", self.address),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_with_and_without_prefix_and_options() {
        let plain: DeviceSpec = "0000:06:00.0".parse().unwrap();
        assert_eq!(plain.iommu, IommuMode::Auto);
        assert_eq!(plain.to_string(), "0000:06:00.0");
        let short: DeviceSpec = "pci:06:00.1,iommu=type1".parse().unwrap();
        assert_eq!(short.iommu, IommuMode::Type1);
        assert_eq!(short.to_string(), "0000:06:00.1,iommu=type1");
        let round: DeviceSpec = short.to_string().parse().unwrap();
        assert_eq!(round, short);
        assert_eq!(
            "0000:06:00.0,iommu=NoIommu"
                .parse::<DeviceSpec>()
                .unwrap()
                .iommu,
            IommuMode::NoIommu
        );
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        let err = |s: &str| s.parse::<DeviceSpec>().unwrap_err().to_string();
        assert!(err("0000:06:00.0,queues=4").contains("unknown option \"queues\""));
        assert!(err("0000:06:00.0,iommu").contains("is not KEY=VALUE"));
        assert!(err("0000:06:00.0,iommu=type1,iommu=auto").contains("iommu given twice"));
        assert!(err("0000:06:00.0,iommu=vt-d").contains("unknown IOMMU mode"));
        assert!(err("emu").contains("bad PCI address"));
        assert!(err("").contains("bad PCI address"));
    }
}
