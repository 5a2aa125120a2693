//! Which data path a CQ or QP gets when the program names none, and what rules the direct
//! one out (issue 35).
//!
//! The direct path has been proven equal to libefa's on efa-sim only, never on a NIC, so
//! [`Backend::Auto`](crate::Backend::Auto) means the provider unless the environment asks
//! for the direct path (as libfabric's `FI_EFA_USE_DATA_PATH_DIRECT` does the other way
//! round). [`DIRECT_ENV`]:
//!
//! * unset: `Auto` is the provider; `Direct` is honoured.
//! * `1` / `on`: `Auto` is the direct path where the rings can be had.
//! * `0` / `off`: `Auto` is the provider and `Direct` is refused
//!   ([`DirectError::DisabledByEnvironment`]): an operator's switch that no program
//!   overrides.
//! * anything else: [`DirectError::BadSetting`] from every CQ and QP creation that
//!   consults it, rather than a guess.
//!
//! Whatever the setting, a device whose CQs are split into sub-CQs (first-generation EFA,
//! PCI id [`EFA_PART_ID_EFA0`]: rdma-core's `create_cq` lays `sub_cqs_per_cq` rings end to
//! end, and `efadv_query_cq` describes the first only) never gets the direct path: `Auto`
//! stays on the provider, `Direct` is [`DirectError::SubCqs`].

use crate::error::{DirectError, Result};
use efa_sys::vendor::EFA_PART_ID_EFA0;

/// The environment variable that turns the direct path on for `Auto` or off for all.
pub const DIRECT_ENV: &str = "EFA_RS_DIRECT";

/// What [`DIRECT_ENV`] says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirectSetting {
    /// Unset: `Auto` is the provider.
    Default,
    /// `1` / `on`.
    On,
    /// `0` / `off`.
    Off,
}

/// Parses a value of [`DIRECT_ENV`].
pub fn parse_setting(v: Option<&[u8]>) -> core::result::Result<DirectSetting, DirectError> {
    match v {
        None => Ok(DirectSetting::Default),
        Some(b"1" | b"on") => Ok(DirectSetting::On),
        Some(b"0" | b"off") => Ok(DirectSetting::Off),
        Some(other) => {
            let mut shown = [0u8; 8];
            let n = other.len().min(shown.len());
            shown[..n].copy_from_slice(&other[..n]);
            Err(DirectError::BadSetting(shown))
        }
    }
}

/// [`DIRECT_ENV`] as this process started with it (read once: a data path does not change
/// under a running program).
#[cfg(feature = "std")]
pub fn setting() -> Result<DirectSetting> {
    use std::os::unix::ffi::OsStrExt;
    static SETTING: std::sync::OnceLock<core::result::Result<DirectSetting, DirectError>> =
        std::sync::OnceLock::new();
    let s = SETTING.get_or_init(|| {
        parse_setting(
            std::env::var_os(DIRECT_ENV)
                .as_deref()
                .map(|v| v.as_bytes()),
        )
    });
    s.map_err(Into::into)
}

/// Without `std` there is no environment (and no direct path).
#[cfg(not(feature = "std"))]
pub fn setting() -> Result<DirectSetting> {
    Ok(DirectSetting::Default)
}

/// Whether a device of PCI id `vendor_part_id` splits its CQs into sub-CQs.
pub fn has_sub_cqs(vendor_part_id: u32) -> bool {
    vendor_part_id == EFA_PART_ID_EFA0
}

/// The device-dependent rule: `Err(SubCqs)` where the device has sub-CQs.
pub fn check_device(vendor_part_id: u32) -> core::result::Result<(), DirectError> {
    if has_sub_cqs(vendor_part_id) {
        return Err(DirectError::SubCqs { vendor_part_id });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_and_a_bad_one_is_named() {
        assert_eq!(parse_setting(None), Ok(DirectSetting::Default));
        assert_eq!(parse_setting(Some(b"1")), Ok(DirectSetting::On));
        assert_eq!(parse_setting(Some(b"on")), Ok(DirectSetting::On));
        assert_eq!(parse_setting(Some(b"0")), Ok(DirectSetting::Off));
        assert_eq!(parse_setting(Some(b"off")), Ok(DirectSetting::Off));
        let e = parse_setting(Some(b"yes please")).unwrap_err();
        assert_eq!(e, DirectError::BadSetting(*b"yes plea"));
        #[cfg(feature = "std")]
        assert_eq!(
            crate::Error::from(e).to_string(),
            "direct backend: EFA_RS_DIRECT=\"yes plea\" is not one of 1, on, 0, off"
        );
    }

    #[test]
    fn first_generation_efa_has_sub_cqs() {
        assert_eq!(
            check_device(EFA_PART_ID_EFA0),
            Err(DirectError::SubCqs {
                vendor_part_id: EFA_PART_ID_EFA0
            })
        );
        assert_eq!(check_device(efa_sys::vendor::EFA_PART_ID_EFA1), Ok(()));
    }
}
