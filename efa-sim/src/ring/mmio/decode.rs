//! Decoding the store that hit a trapped doorbell page: which value it writes, how wide
//! it is and how long the instruction is, for the stores a doorbell write compiles to
//! (rdma-core's `mmio_write32`, a Rust atomic or volatile store, a C `volatile` store, at
//! any optimisation level). Anything else is left undecoded: the trap then opens the
//! page and lets the store run (see [`super`]).
//!
//! Pure functions over the instruction bytes and a register reader, so they are unit
//! tested on both architectures' encodings whichever one runs the tests.

/// A decoded store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Store {
    /// The value stored (its low `width` bytes).
    pub value: u64,
    /// Bytes stored: 1, 2, 4 or 8.
    pub width: u8,
    /// Bytes of the instruction (the program counter moves on by this much).
    pub len: u8,
    /// `xchg`: the register that receives the memory's old value.
    pub exchange_into: Option<u8>,
}

/// Most bytes an x86-64 instruction has.
pub const X86_MAX_LEN: usize = 15;

/// Why [`x86_64_parse`] stopped without a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// `code` ends before the instruction does: give more bytes.
    Short,
    /// Not a store this decoder knows.
    Other,
}

/// Decodes an x86-64 store to memory from `code` (the bytes at the faulting RIP);
/// `reg(n)` reads general register `n` (0 = RAX ... 15 = R15, the encoding's numbering).
/// Covers `mov r/m, r` (0x88, 0x89), `mov r/m, imm` (0xC6 /0, 0xC7 /0) and
/// `xchg r/m, r` (0x87), with an operand-size prefix and REX.
pub fn x86_64(code: &[u8], reg: impl Fn(u8) -> u64) -> Option<Store> {
    x86_64_parse(code, reg).ok()
}

/// [`x86_64`], telling a cut-short instruction from an unknown one, so that a caller
/// reading code can fetch one byte at a time and never read past the instruction.
pub fn x86_64_parse(code: &[u8], reg: impl Fn(u8) -> u64) -> Result<Store, Stop> {
    let byte = |at: usize| code.get(at).copied().ok_or(Stop::Short);
    let mut at = 0usize;
    let mut opsize16 = false;
    let mut rex = 0u8;
    loop {
        if at >= X86_MAX_LEN {
            return Err(Stop::Other);
        }
        match byte(at)? {
            0x66 => opsize16 = true,
            b @ 0x40..=0x4f => {
                rex = b;
                at += 1;
                break;
            }
            _ => break,
        }
        at += 1;
    }
    let opcode = byte(at)?;
    if !matches!(opcode, 0x87 | 0x88 | 0x89 | 0xc6 | 0xc7) {
        return Err(Stop::Other);
    }
    at += 1;
    let modrm = byte(at)?;
    at += 1;
    let (md, reg_field, rm) = (modrm >> 6, (modrm >> 3) & 7, modrm & 7);
    if md == 3 {
        return Err(Stop::Other); // a register operand: no memory store to emulate
    }
    if rm == 4 {
        let sib = byte(at)?;
        at += 1;
        if md == 0 && sib & 7 == 5 {
            at += 4; // no base: disp32
        }
    } else if md == 0 && rm == 5 {
        at += 4; // RIP-relative disp32
    }
    at += match md {
        1 => 1,
        2 => 4,
        _ => 0,
    };
    let rex_w = rex & 0x08 != 0;
    let src = reg_field | ((rex & 0x04) << 1);
    let width = if opcode & 1 == 0 {
        1
    } else if rex_w {
        8
    } else if opsize16 {
        2
    } else {
        4
    };
    let (value, exchange_into) = match opcode {
        0x87..=0x89 => {
            // Without REX, byte registers 4-7 are AH, CH, DH, BH: not worth decoding.
            if width == 1 && rex == 0 && src >= 4 {
                return Err(Stop::Other);
            }
            // The displacement bytes belong to the instruction: make sure they are there.
            if at > 0 {
                byte(at - 1)?;
            }
            (reg(src), (opcode == 0x87).then_some(src))
        }
        _ if reg_field == 0 => {
            let imm_len = match width {
                1 => 1,
                2 => 2,
                _ => 4,
            };
            let mut raw = [0u8; 8];
            for (i, b) in raw.iter_mut().take(imm_len).enumerate() {
                *b = byte(at + i)?;
            }
            at += imm_len;
            // imm32 is sign-extended to 64 bits.
            let value = match imm_len {
                4 => i64::from(i32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]])) as u64,
                _ => u64::from_le_bytes(raw),
            };
            (value, None)
        }
        _ => return Err(Stop::Other),
    };
    if at > X86_MAX_LEN {
        return Err(Stop::Other);
    }
    Ok(Store {
        value: truncate(value, width),
        width,
        len: at as u8,
        exchange_into,
    })
}

/// Decodes an AArch64 store of a W or X register from the instruction word `insn`;
/// `reg(n)` reads X`n` (n < 31; register 31 is the zero register here). Covers `STLR`,
/// `STR` (unsigned offset, register offset) and `STUR`, none of which write the base
/// register back.
pub fn aarch64(insn: u32, reg: impl Fn(u8) -> u64) -> Option<Store> {
    const STLR: (u32, u32) = (0xbfff_fc00, 0x889f_fc00);
    const STR_UNSIGNED: (u32, u32) = (0xbfc0_0000, 0xb900_0000);
    const STUR: (u32, u32) = (0xbfe0_0c00, 0xb800_0000);
    const STR_REGISTER: (u32, u32) = (0xbfe0_0c00, 0xb820_0800);
    let known = [STLR, STR_UNSIGNED, STUR, STR_REGISTER];
    if !known.iter().any(|&(mask, bits)| insn & mask == bits) {
        return None;
    }
    let width = if insn & (1 << 30) != 0 { 8 } else { 4 };
    let rt = (insn & 0x1f) as u8;
    let value = if rt == 31 { 0 } else { reg(rt) };
    Some(Store {
        value: truncate(value, width),
        width,
        len: 4,
        exchange_into: None,
    })
}

fn truncate(v: u64, width: u8) -> u64 {
    if width >= 8 {
        v
    } else {
        v & ((1u64 << (u32::from(width) * 8)) - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regs(n: u8) -> u64 {
        0x1111_1111_0000_0000 | u64::from(n) << 8 | 0x7f
    }

    #[test]
    fn x86_stores_a_doorbell_compiles_to() {
        // mov [rdi], esi
        let s = x86_64(&[0x89, 0x37], regs).unwrap();
        assert_eq!(
            s,
            Store {
                value: regs(6) & 0xffff_ffff,
                width: 4,
                len: 2,
                exchange_into: None
            }
        );
        // mov [r8+0x10], r9d  (REX.RB, disp8)
        let s = x86_64(&[0x45, 0x89, 0x48, 0x10], regs).unwrap();
        assert_eq!((s.value, s.width, s.len), (regs(9) & 0xffff_ffff, 4, 4));
        // mov [rax+rcx*4+0x12345678], edx  (SIB, disp32)
        let s = x86_64(&[0x89, 0x94, 0x88, 0x78, 0x56, 0x34, 0x12], regs).unwrap();
        assert_eq!((s.width, s.len), (4, 7));
        // mov [rip+0x100], eax
        let s = x86_64(&[0x89, 0x05, 0, 1, 0, 0], regs).unwrap();
        assert_eq!((s.value, s.len), (regs(0) & 0xffff_ffff, 6));
        // mov dword [rax], 0x1234
        let s = x86_64(&[0xc7, 0x00, 0x34, 0x12, 0, 0], regs).unwrap();
        assert_eq!((s.value, s.width, s.len), (0x1234, 4, 6));
        // mov qword [rax], -1 (imm32 sign-extended)
        let s = x86_64(&[0x48, 0xc7, 0x00, 0xff, 0xff, 0xff, 0xff], regs).unwrap();
        assert_eq!((s.value, s.width, s.len), (u64::MAX, 8, 7));
        // mov [rbx], r10 (REX.WR)
        let s = x86_64(&[0x4c, 0x89, 0x13], regs).unwrap();
        assert_eq!((s.value, s.width, s.len), (regs(10), 8, 3));
        // mov word [rax], cx
        let s = x86_64(&[0x66, 0x89, 0x08], regs).unwrap();
        assert_eq!((s.value, s.width, s.len), (regs(1) & 0xffff, 2, 3));
        // xchg [rdi], eax (a sequentially consistent atomic store)
        let s = x86_64(&[0x87, 0x07], regs).unwrap();
        assert_eq!((s.width, s.len, s.exchange_into), (4, 2, Some(0)));
        // mov byte [rdi], sil needs REX; mov [rdi], ah is not decoded
        assert_eq!(x86_64(&[0x40, 0x88, 0x37], regs).unwrap().width, 1);
        assert_eq!(x86_64(&[0x88, 0x27], regs), None);
    }

    #[test]
    fn x86_other_instructions_are_left_alone() {
        assert_eq!(x86_64(&[0x89, 0xc8], regs), None); // mov eax, ecx: no memory
        assert_eq!(x86_64(&[0xf0, 0x0f, 0xb1, 0x0f], regs), None); // lock cmpxchg
        assert_eq!(x86_64(&[0xc7, 0x08, 0, 0, 0, 0], regs), None); // C7 /1
        assert_eq!(x86_64(&[0x0f, 0x11, 0x07], regs), None); // movups
        assert_eq!(x86_64(&[0x89], regs), None); // cut short
        assert_eq!(x86_64(&[0xc7, 0x00, 0x34], regs), None); // immediate cut short
        assert_eq!(x86_64(&[0x66; 20], regs), None); // prefixes only
    }

    #[test]
    fn aarch64_stores_a_doorbell_compiles_to() {
        // stlr w1, [x0]
        let s = aarch64(0x889f_fc01, regs).unwrap();
        assert_eq!(
            s,
            Store {
                value: regs(1) & 0xffff_ffff,
                width: 4,
                len: 4,
                exchange_into: None
            }
        );
        // stlr x2, [x3]
        assert_eq!(aarch64(0xc89f_fc62, regs).unwrap().width, 8);
        // str w8, [x9, #16]
        let s = aarch64(0xb900_1128, regs).unwrap();
        assert_eq!((s.value, s.width), (regs(8) & 0xffff_ffff, 4));
        // stur w0, [x1, #-4]
        assert_eq!(aarch64(0xb81f_c020, regs).unwrap().width, 4);
        // str w2, [x0, x1]
        assert_eq!(
            aarch64(0xb821_6802, regs).unwrap().value,
            regs(2) & 0xffff_ffff
        );
        // str wzr, [x0]
        assert_eq!(aarch64(0xb900_001f, regs).unwrap().value, 0);
    }

    #[test]
    fn aarch64_other_instructions_are_left_alone() {
        assert_eq!(aarch64(0xb800_0c20, regs), None); // str w0, [x1, #0]! (pre-index)
        assert_eq!(aarch64(0xb940_0020, regs), None); // ldr w0, [x1]
        assert_eq!(aarch64(0x3900_0020, regs), None); // strb
        assert_eq!(aarch64(0xd503_201f, regs), None); // nop
    }
}
