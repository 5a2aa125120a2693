//! A tiny typed-flag-set generator (no external crate): each set is a `Copy` newtype over
//! its C bits with named constants, set operations and a readable `Debug`.

macro_rules! flag_set {
    (
        $(#[$meta:meta])*
        pub struct $name:ident: $ty:ty {
            $( $(#[$fmeta:meta])* const $flag:ident = $value:expr; )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        #[repr(transparent)]
        pub struct $name($ty);

        impl $name {
            $( $(#[$fmeta])* pub const $flag: $name = $name($value); )*

            /// No flags.
            #[inline]
            pub const fn empty() -> Self {
                $name(0)
            }
            /// Every flag this type names.
            #[inline]
            pub const fn all() -> Self {
                $name(0 $(| $value)*)
            }
            /// The raw C bits.
            #[inline]
            pub const fn bits(self) -> $ty {
                self.0
            }
            /// From raw C bits, keeping bits this type has no name for.
            #[inline]
            pub const fn from_bits_retain(bits: $ty) -> Self {
                $name(bits)
            }
            /// True if every flag of `other` is set in `self`.
            #[inline]
            pub const fn contains(self, other: Self) -> bool {
                self.0 & other.0 == other.0
            }
            /// True if any flag of `other` is set in `self`.
            #[inline]
            pub const fn intersects(self, other: Self) -> bool {
                self.0 & other.0 != 0
            }
            /// True if no flag is set.
            #[inline]
            pub const fn is_empty(self) -> bool {
                self.0 == 0
            }
            /// `self` with the flags of `other` added.
            #[inline]
            pub const fn union(self, other: Self) -> Self {
                $name(self.0 | other.0)
            }
            /// `self` with the flags of `other` removed.
            #[inline]
            pub const fn difference(self, other: Self) -> Self {
                $name(self.0 & !other.0)
            }
        }

        impl core::ops::BitOr for $name {
            type Output = Self;
            #[inline]
            fn bitor(self, rhs: Self) -> Self {
                $name(self.0 | rhs.0)
            }
        }
        impl core::ops::BitOrAssign for $name {
            #[inline]
            fn bitor_assign(&mut self, rhs: Self) {
                self.0 |= rhs.0;
            }
        }
        impl core::ops::BitAnd for $name {
            type Output = Self;
            #[inline]
            fn bitand(self, rhs: Self) -> Self {
                $name(self.0 & rhs.0)
            }
        }

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                let mut first = true;
                let mut rest = self.0;
                write!(f, "{}(", stringify!($name))?;
                $(
                    if $value != 0 && self.0 & $value == $value {
                        if !first { write!(f, " | ")?; }
                        write!(f, "{}", stringify!($flag))?;
                        first = false;
                        rest &= !$value;
                    }
                )*
                if rest != 0 {
                    if !first { write!(f, " | ")?; }
                    write!(f, "{:#x}", rest)?;
                }
                write!(f, ")")
            }
        }
    };
}

pub(crate) use flag_set;
