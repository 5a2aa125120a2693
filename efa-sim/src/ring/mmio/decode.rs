//! Decoding the store that hit a trapped doorbell page: which value it writes, where, how
//! wide it is and how long the instruction is, for the stores a doorbell write compiles to
//! (rdma-core's `mmio_write32`, a Rust atomic or volatile store, a C `volatile` store, at
//! any optimisation level). Anything else is left undecoded: the trap then opens the
//! page and lets the store run (see [`super`]).
//!
//! The address is decoded too, and the trap acts only when it is the fault's: a context
//! whose program counter is not exactly the faulting instruction (callgrind without
//! precise registers reports the start of the translated block) must not have some other
//! instruction emulated and skipped.
//!
//! Pure functions over the instruction bytes and a register reader, so they are unit
//! tested on both architectures' encodings whichever one runs the tests.

/// A decoded store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Store {
    /// The value stored (its low `width` bytes).
    pub value: u64,
    /// Where it is stored.
    pub addr: u64,
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

/// Decodes an x86-64 store to memory from `code`, the bytes at `rip`; `reg(n)` reads
/// general register `n` (0 = RAX ... 15 = R15, the encoding's numbering). Covers
/// `mov r/m, r` (0x88, 0x89), `mov r/m, imm` (0xC6 /0, 0xC7 /0) and `xchg r/m, r` (0x87),
/// with an operand-size prefix and REX, every addressing form but segment overrides.
pub fn x86_64(code: &[u8], rip: u64, reg: impl Fn(u8) -> u64) -> Option<Store> {
    x86_64_parse(code, rip, reg).ok()
}

/// [`x86_64`], telling a cut-short instruction from an unknown one, so that a caller
/// reading code can fetch one byte at a time and never read past the instruction.
pub fn x86_64_parse(code: &[u8], rip: u64, reg: impl Fn(u8) -> u64) -> Result<Store, Stop> {
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
    let (rex_b, rex_x) = ((rex & 1) << 3, (rex & 2) << 2);
    // The address, without its displacement: base (None: RIP-relative) + index.
    let mut rip_relative = false;
    let mut addr = 0u64;
    let mut disp_len = match md {
        1 => 1,
        2 => 4,
        _ => 0,
    };
    if rm == 4 {
        let sib = byte(at)?;
        at += 1;
        let (scale, index, base) = (sib >> 6, ((sib >> 3) & 7) | rex_x, sib & 7);
        if index != 4 {
            addr = reg(index) << scale;
        }
        if md == 0 && base == 5 {
            disp_len = 4; // no base: disp32
        } else {
            addr = addr.wrapping_add(reg(base | rex_b));
        }
    } else if md == 0 && rm == 5 {
        rip_relative = true;
        disp_len = 4;
    } else {
        addr = reg(rm | rex_b);
    }
    let mut disp = [0u8; 4];
    for (i, b) in disp.iter_mut().take(disp_len).enumerate() {
        *b = byte(at + i)?;
    }
    at += disp_len;
    let disp = match disp_len {
        1 => i64::from(disp[0] as i8),
        4 => i64::from(i32::from_le_bytes(disp)),
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
    if rip_relative {
        addr = rip.wrapping_add(at as u64); // relative to the next instruction
    }
    Ok(Store {
        value: truncate(value, width),
        addr: addr.wrapping_add(disp as u64),
        width,
        len: at as u8,
        exchange_into,
    })
}

/// Decodes an AArch64 store of a W or X register from the instruction word `insn`;
/// `reg(n)` reads X`n` for n < 31, `sp` is the stack pointer (register 31 as a base; as
/// the stored register it is the zero register). Covers `STLR`, `STR` (unsigned offset;
/// register offset with LSL, UXTW, SXTW, SXTX) and `STUR`, none of which write the base
/// register back.
pub fn aarch64(insn: u32, sp: u64, reg: impl Fn(u8) -> u64) -> Option<Store> {
    const STLR: (u32, u32) = (0xbfff_fc00, 0x889f_fc00);
    const STR_UNSIGNED: (u32, u32) = (0xbfc0_0000, 0xb900_0000);
    const STUR: (u32, u32) = (0xbfe0_0c00, 0xb800_0000);
    const STR_REGISTER: (u32, u32) = (0xbfe0_0c00, 0xb820_0800);
    let is = |(mask, bits): (u32, u32)| insn & mask == bits;
    let x64 = insn & (1 << 30) != 0;
    let (width, size_shift) = if x64 { (8u8, 3u32) } else { (4, 2) };
    let rt = (insn & 0x1f) as u8;
    let rn = ((insn >> 5) & 0x1f) as u8;
    let base = if rn == 31 { sp } else { reg(rn) };
    let addr = if is(STLR) {
        base
    } else if is(STR_UNSIGNED) {
        base.wrapping_add(u64::from((insn >> 10) & 0xfff) << size_shift)
    } else if is(STUR) {
        // imm9, sign-extended.
        let imm9 = (((insn >> 12) & 0x1ff) as i32) << 23 >> 23;
        base.wrapping_add(imm9 as i64 as u64)
    } else if is(STR_REGISTER) {
        let rm = ((insn >> 16) & 0x1f) as u8;
        let xm = if rm == 31 { 0 } else { reg(rm) };
        let offset = match (insn >> 13) & 7 {
            0b010 => xm & 0xffff_ffff,                 // UXTW
            0b011 => xm,                               // LSL (UXTX)
            0b110 => (xm as u32 as i32) as i64 as u64, // SXTW
            0b111 => xm,                               // SXTX
            _ => return None,
        };
        let shift = if insn & (1 << 12) != 0 { size_shift } else { 0 };
        base.wrapping_add(offset << shift)
    } else {
        return None;
    };
    let value = if rt == 31 { 0 } else { reg(rt) };
    Some(Store {
        value: truncate(value, width),
        addr,
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
    const RIP: u64 = 0x5555_0000;
    const SP: u64 = 0x7fff_0000;
    fn x86(code: &[u8]) -> Option<Store> {
        x86_64(code, RIP, regs)
    }
    fn arm(insn: u32) -> Option<Store> {
        aarch64(insn, SP, regs)
    }
    fn low(n: u8) -> u64 {
        regs(n) & 0xffff_ffff
    }

    #[test]
    fn x86_stores_a_doorbell_compiles_to() {
        // mov [rdi], esi
        let s = x86(&[0x89, 0x37]).unwrap();
        let want = Store {
            value: low(6),
            addr: regs(7),
            width: 4,
            len: 2,
            exchange_into: None,
        };
        assert_eq!(s, want);
        // mov [r8+0x10], r9d  (REX.RB, disp8)
        let s = x86(&[0x45, 0x89, 0x48, 0x10]).unwrap();
        assert_eq!(
            (s.value, s.addr, s.width, s.len),
            (low(9), regs(8) + 0x10, 4, 4)
        );
        // mov [rdi-4], eax  (negative disp8)
        assert_eq!(x86(&[0x89, 0x47, 0xfc]).unwrap().addr, regs(7) - 4);
        // mov [rax+rcx*4+0x12345678], edx  (SIB, disp32)
        let s = x86(&[0x89, 0x94, 0x88, 0x78, 0x56, 0x34, 0x12]).unwrap();
        assert_eq!(
            (s.addr, s.width, s.len),
            (regs(0) + (regs(1) << 2) + 0x1234_5678, 4, 7)
        );
        // mov [0x1000], eax  (SIB without base or index)
        let s = x86(&[0x89, 0x04, 0x25, 0, 0x10, 0, 0]).unwrap();
        assert_eq!((s.addr, s.len), (0x1000, 7));
        // mov [rip+0x100], eax  (relative to the next instruction)
        let s = x86(&[0x89, 0x05, 0, 1, 0, 0]).unwrap();
        assert_eq!((s.value, s.addr, s.len), (low(0), RIP + 6 + 0x100, 6));
        // mov dword [rax], 0x1234
        let s = x86(&[0xc7, 0x00, 0x34, 0x12, 0, 0]).unwrap();
        assert_eq!((s.value, s.addr, s.width, s.len), (0x1234, regs(0), 4, 6));
        // mov dword [rip+0x10], 7: the immediate counts in the instruction's length
        let s = x86(&[0xc7, 0x05, 0x10, 0, 0, 0, 7, 0, 0, 0]).unwrap();
        assert_eq!((s.value, s.addr, s.len), (7, RIP + 10 + 0x10, 10));
        // mov qword [rax], -1 (imm32 sign-extended)
        let s = x86(&[0x48, 0xc7, 0x00, 0xff, 0xff, 0xff, 0xff]).unwrap();
        assert_eq!((s.value, s.width, s.len), (u64::MAX, 8, 7));
        // mov [rbx], r10 (REX.WR)
        let s = x86(&[0x4c, 0x89, 0x13]).unwrap();
        assert_eq!((s.value, s.addr, s.width, s.len), (regs(10), regs(3), 8, 3));
        // mov [r13+r12*8], eax (REX.XB; base 5 with mod 1 needs its disp8)
        let s = x86(&[0x43, 0x89, 0x44, 0xe5, 0x00]).unwrap();
        assert_eq!((s.addr, s.len), (regs(13) + (regs(12) << 3), 5));
        // mov word [rax], cx
        let s = x86(&[0x66, 0x89, 0x08]).unwrap();
        assert_eq!((s.value, s.width, s.len), (regs(1) & 0xffff, 2, 3));
        // xchg [rdi], eax (a sequentially consistent atomic store)
        let s = x86(&[0x87, 0x07]).unwrap();
        assert_eq!(
            (s.addr, s.width, s.len, s.exchange_into),
            (regs(7), 4, 2, Some(0))
        );
        // mov byte [rdi], sil needs REX; mov [rdi], ah is not decoded
        assert_eq!(x86(&[0x40, 0x88, 0x37]).unwrap().width, 1);
        assert_eq!(x86(&[0x88, 0x27]), None);
    }

    #[test]
    fn x86_other_instructions_are_left_alone() {
        assert_eq!(x86(&[0x89, 0xc8]), None); // mov eax, ecx: no memory
        assert_eq!(x86(&[0xf0, 0x0f, 0xb1, 0x0f]), None); // lock cmpxchg
        assert_eq!(x86(&[0xc7, 0x08, 0, 0, 0, 0]), None); // C7 /1
        assert_eq!(x86(&[0x0f, 0x11, 0x07]), None); // movups
        assert_eq!(x86(&[0x0f, 0xae, 0xf8]), None); // sfence
        assert_eq!(x86(&[0x89]), None); // cut short
        assert_eq!(x86(&[0x89, 0x47]), None); // displacement cut short
        assert_eq!(x86(&[0xc7, 0x00, 0x34]), None); // immediate cut short
        assert_eq!(x86(&[0x66; 20]), None); // prefixes only
        assert_eq!(x86_64_parse(&[0x89, 0x47], RIP, regs), Err(Stop::Short));
        assert_eq!(x86_64_parse(&[0x0f, 0xae], RIP, regs), Err(Stop::Other));
    }

    #[test]
    fn aarch64_stores_a_doorbell_compiles_to() {
        // stlr w1, [x0]
        let s = arm(0x889f_fc01).unwrap();
        let want = Store {
            value: low(1),
            addr: regs(0),
            width: 4,
            len: 4,
            exchange_into: None,
        };
        assert_eq!(s, want);
        // stlr x2, [x3]
        let s = arm(0xc89f_fc62).unwrap();
        assert_eq!((s.value, s.addr, s.width), (regs(2), regs(3), 8));
        // str w8, [x9, #16]
        let s = arm(0xb900_1128).unwrap();
        assert_eq!((s.value, s.addr, s.width), (low(8), regs(9) + 16, 4));
        // str w0, [sp, #8]
        assert_eq!(arm(0xb900_0be0).unwrap().addr, SP + 8);
        // stur w0, [x1, #-4]
        let s = arm(0xb81f_c020).unwrap();
        assert_eq!((s.addr, s.width), (regs(1) - 4, 4));
        // str w2, [x0, x1]
        let s = arm(0xb821_6802).unwrap();
        assert_eq!((s.value, s.addr), (low(2), regs(0) + regs(1)));
        // str w2, [x0, w1, uxtw #2]
        assert_eq!(arm(0xb821_5802).unwrap().addr, regs(0) + (low(1) << 2));
        // str wzr, [x0]
        assert_eq!(arm(0xb900_001f).unwrap().value, 0);
    }

    #[test]
    fn aarch64_other_instructions_are_left_alone() {
        assert_eq!(arm(0xb800_0c20), None); // str w0, [x1, #0]! (pre-index)
        assert_eq!(arm(0xb940_0020), None); // ldr w0, [x1]
        assert_eq!(arm(0x3900_0020), None); // strb
        assert_eq!(arm(0xd503_201f), None); // nop
        assert_eq!(arm(0xb821_2802), None); // str w2, [x0, w1, uxtb]: reserved extend
    }
}
