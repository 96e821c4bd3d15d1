//! Registers the host reaches with single MMIO loads and stores: each register is a typed value
//! (a `bitfield-struct` word) tied to its offset in its block, so the offset, the access width and
//! the meaning of every bit live in one table.
//!
//! Two blocks hold registers: the initialization segment at BAR0 offset 0 (see
//! [`crate::init_seg`], Linux `struct mlx5_init_seg` and `struct health_buffer` in `device.h`)
//! and each UAR page (see [`crate::doorbell`], Linux `MLX5_CQ_DOORBELL`, `MLX5_EQ_DOORBEL_OFFSET`
//! and the BlueFlame registers). Register words are big-endian on the bus: an accessor converts
//! a register's [`Register::to_raw`] value with `to_be_bytes` before the store and back with
//! `from_be_bytes` after the load.

/// The width of a register: 32 or 64 bits.
pub trait RegisterWord: Copy {
    /// Width in bytes (4 or 8).
    const BYTES: usize;
}

impl RegisterWord for u32 {
    const BYTES: usize = 4;
}

impl RegisterWord for u64 {
    const BYTES: usize = 8;
}

/// A device register: a typed word at a fixed byte offset from the start of its block.
pub trait Register: Copy {
    /// The register's raw word (`u32` or `u64`), in host order.
    type Word: RegisterWord;
    /// Byte offset from the start of the register's block (BAR0 for the initialization
    /// segment, the UAR page for UAR registers); a multiple of the register's width.
    const OFFSET: usize;
    /// The register's name in Linux `device.h` (field of `mlx5_init_seg` / `health_buffer`, or
    /// the doorbell's macro).
    const NAME: &'static str;
    /// The typed register from its raw word.
    fn from_raw(word: Self::Word) -> Self;
    /// The raw word of this value.
    fn to_raw(self) -> Self::Word;
}

/// Declares register tables: `Type: word @ offset = "linux name"` rows, each binding a
/// `bitfield-struct` type (with `from_bits`/`into_bits`) to its offset. Every offset is checked
/// at compile time to be aligned to the register's width.
macro_rules! registers {
    ($($ty:ident : $word:ident @ $offset:expr => $name:literal),* $(,)?) => {
        $(
            impl crate::mmio::Register for $ty {
                type Word = $word;
                const OFFSET: usize = $offset;
                const NAME: &'static str = $name;
                #[inline(always)]
                fn from_raw(word: $word) -> Self {
                    Self::from_bits(word)
                }
                #[inline(always)]
                fn to_raw(self) -> $word {
                    self.into_bits()
                }
            }
            const _: () = assert!(
                ($offset) % <$word as crate::mmio::RegisterWord>::BYTES == 0,
                concat!(stringify!($ty), " is not aligned to its width")
            );
        )*
    };
}
pub(crate) use registers;
