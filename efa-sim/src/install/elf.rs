//! Just enough ELF to vet the embedded library and name it by content: the file must be
//! a 64-bit little-endian shared object (what rustc writes for a cdylib on x86-64 and
//! aarch64 Linux), and its GNU build-id note, a hash the linker computes over the whole
//! output, is the cache key.

use std::mem::{offset_of, size_of};

use libc::{Elf64_Ehdr, Elf64_Phdr};

/// `NT_GNU_BUILD_ID` from `<elf.h>` (the libc crate does not define it): the note type
/// of the build-id under the owner name "GNU".
const NT_GNU_BUILD_ID: u32 = 3;
/// Note owner of the build-id (NUL included, as stored).
const GNU_OWNER: &[u8] = b"GNU\0";

/// Why bytes are not a library efa-sim can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElfError {
    /// No ELF magic, or shorter than an ELF header.
    NotElf,
    /// ELF, but not 64-bit little-endian.
    WrongClass,
    /// ELF, but not a shared object (`ET_DYN`).
    NotSharedObject,
    /// A position-independent executable (`ET_DYN` with a program interpreter).
    Executable,
    /// A header or program-header table that points outside the file.
    Truncated,
}

impl std::fmt::Display for ElfError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ElfError::NotElf => "not an ELF file",
            ElfError::WrongClass => "not a 64-bit little-endian ELF file",
            ElfError::NotSharedObject => "not an ELF shared object",
            ElfError::Executable => "an executable (it has a program interpreter), not a library",
            ElfError::Truncated => "ELF headers point past the end of the file",
        })
    }
}

impl std::error::Error for ElfError {}

fn read<const N: usize>(bytes: &[u8], at: usize) -> Result<[u8; N], ElfError> {
    at.checked_add(N)
        .and_then(|end| bytes.get(at..end))
        .map(|s| s.try_into().expect("slice of length N"))
        .ok_or(ElfError::Truncated)
}

fn u16_at(bytes: &[u8], at: usize) -> Result<u16, ElfError> {
    read(bytes, at).map(u16::from_le_bytes)
}

fn u32_at(bytes: &[u8], at: usize) -> Result<u32, ElfError> {
    read(bytes, at).map(u32::from_le_bytes)
}

fn u64_at(bytes: &[u8], at: usize) -> Result<usize, ElfError> {
    let v = read(bytes, at).map(u64::from_le_bytes)?;
    usize::try_from(v).map_err(|_| ElfError::Truncated)
}

/// Checks that `bytes` is a 64-bit little-endian ELF shared object.
pub fn check_shared_object(bytes: &[u8]) -> Result<(), ElfError> {
    let magic = [libc::ELFMAG0, libc::ELFMAG1, libc::ELFMAG2, libc::ELFMAG3];
    if bytes.len() < size_of::<Elf64_Ehdr>() || bytes[..libc::SELFMAG] != magic {
        return Err(ElfError::NotElf);
    }
    if bytes[libc::EI_CLASS] != libc::ELFCLASS64 || bytes[libc::EI_DATA] != libc::ELFDATA2LSB {
        return Err(ElfError::WrongClass);
    }
    if u16_at(bytes, offset_of!(Elf64_Ehdr, e_type))? != libc::ET_DYN {
        return Err(ElfError::NotSharedObject);
    }
    Ok(())
}

/// Checks that `bytes` (a file, or at least its start up to the end of its program
/// headers) is a 64-bit little-endian shared library: a shared object without a program
/// interpreter (a PIE executable is `ET_DYN` too, but has one).
pub fn check_library(bytes: &[u8]) -> Result<(), ElfError> {
    check_shared_object(bytes)?;
    for ph in program_headers(bytes)? {
        if u32_at(bytes, ph + offset_of!(Elf64_Phdr, p_type))? == libc::PT_INTERP {
            return Err(ElfError::Executable);
        }
    }
    Ok(())
}

/// Offsets of the program headers of a checked shared object.
fn program_headers(bytes: &[u8]) -> Result<Vec<usize>, ElfError> {
    let phoff = u64_at(bytes, offset_of!(Elf64_Ehdr, e_phoff))?;
    let phentsize = usize::from(u16_at(bytes, offset_of!(Elf64_Ehdr, e_phentsize))?);
    let phnum = usize::from(u16_at(bytes, offset_of!(Elf64_Ehdr, e_phnum))?);
    if phentsize < size_of::<Elf64_Phdr>() {
        return Err(ElfError::Truncated);
    }
    (0..phnum)
        .map(|i| {
            let ph = phoff
                .checked_add(i * phentsize)
                .ok_or(ElfError::Truncated)?;
            // The whole header must be there.
            read::<{ size_of::<Elf64_Phdr>() }>(bytes, ph)?;
            Ok(ph)
        })
        .collect()
}

/// The GNU build-id of a shared object (`None` when it carries none).
pub fn build_id(bytes: &[u8]) -> Result<Option<&[u8]>, ElfError> {
    check_shared_object(bytes)?;
    for ph in program_headers(bytes)? {
        if u32_at(bytes, ph + offset_of!(Elf64_Phdr, p_type))? != libc::PT_NOTE {
            continue;
        }
        let start = u64_at(bytes, ph + offset_of!(Elf64_Phdr, p_offset))?;
        let len = u64_at(bytes, ph + offset_of!(Elf64_Phdr, p_filesz))?;
        let notes = start
            .checked_add(len)
            .and_then(|end| bytes.get(start..end))
            .ok_or(ElfError::Truncated)?;
        if let Some(id) = find_build_id(notes)? {
            return Ok(Some(id));
        }
    }
    Ok(None)
}

/// Walks one note segment: 4-byte name size, descriptor size and type, then the name and
/// the descriptor, each padded to 4 bytes.
fn find_build_id(mut notes: &[u8]) -> Result<Option<&[u8]>, ElfError> {
    let pad = |n: usize| n.checked_add(3).map(|v| v & !3).ok_or(ElfError::Truncated);
    while notes.len() >= 12 {
        let namesz = u32_at(notes, 0)? as usize;
        let descsz = u32_at(notes, 4)? as usize;
        let kind = u32_at(notes, 8)?;
        let name_end = 12usize
            .checked_add(pad(namesz)?)
            .ok_or(ElfError::Truncated)?;
        let desc_end = name_end
            .checked_add(pad(descsz)?)
            .ok_or(ElfError::Truncated)?;
        if desc_end > notes.len() {
            return Err(ElfError::Truncated);
        }
        if kind == NT_GNU_BUILD_ID && &notes[12..12 + namesz] == GNU_OWNER {
            return Ok(Some(&notes[name_end..name_end + descsz]));
        }
        notes = &notes[desc_end..];
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 shared object: header, one PT_NOTE program header, `notes`.
    fn elf_with_notes(notes: &[u8]) -> Vec<u8> {
        let eh = size_of::<Elf64_Ehdr>();
        let ph = size_of::<Elf64_Phdr>();
        let mut b = vec![0u8; eh + ph];
        b[..4].copy_from_slice(&[libc::ELFMAG0, libc::ELFMAG1, libc::ELFMAG2, libc::ELFMAG3]);
        b[libc::EI_CLASS] = libc::ELFCLASS64;
        b[libc::EI_DATA] = libc::ELFDATA2LSB;
        let put16 =
            |b: &mut Vec<u8>, at: usize, v: u16| b[at..at + 2].copy_from_slice(&v.to_le_bytes());
        put16(&mut b, offset_of!(Elf64_Ehdr, e_type), libc::ET_DYN);
        b[offset_of!(Elf64_Ehdr, e_phoff)..][..8].copy_from_slice(&(eh as u64).to_le_bytes());
        put16(&mut b, offset_of!(Elf64_Ehdr, e_phentsize), ph as u16);
        put16(&mut b, offset_of!(Elf64_Ehdr, e_phnum), 1);
        b[eh + offset_of!(Elf64_Phdr, p_type)..][..4].copy_from_slice(&libc::PT_NOTE.to_le_bytes());
        b[eh + offset_of!(Elf64_Phdr, p_offset)..][..8]
            .copy_from_slice(&((eh + ph) as u64).to_le_bytes());
        b[eh + offset_of!(Elf64_Phdr, p_filesz)..][..8]
            .copy_from_slice(&(notes.len() as u64).to_le_bytes());
        b.extend_from_slice(notes);
        b
    }

    fn note(kind: u32, name: &[u8], desc: &[u8]) -> Vec<u8> {
        let mut n = Vec::new();
        n.extend_from_slice(&(name.len() as u32).to_le_bytes());
        n.extend_from_slice(&(desc.len() as u32).to_le_bytes());
        n.extend_from_slice(&kind.to_le_bytes());
        for part in [name, desc] {
            n.extend_from_slice(part);
            n.resize(n.len().next_multiple_of(4), 0);
        }
        n
    }

    #[test]
    fn finds_the_gnu_build_id_after_other_notes() {
        let mut notes = note(1, b"GNU\0", &[9; 16]); // NT_GNU_ABI_TAG-like, skipped
        notes.extend(note(NT_GNU_BUILD_ID, b"XYZ\0", &[7; 20])); // wrong owner
        notes.extend(note(NT_GNU_BUILD_ID, GNU_OWNER, &[0xab; 20]));
        assert_eq!(build_id(&elf_with_notes(&notes)), Ok(Some(&[0xab; 20][..])));
        assert_eq!(
            build_id(&elf_with_notes(&note(1, b"GNU\0", &[1; 4]))),
            Ok(None)
        );
    }

    #[test]
    fn rejects_what_is_not_a_64_bit_shared_object() {
        let good = elf_with_notes(&[]);
        assert_eq!(check_shared_object(&good), Ok(()));
        assert_eq!(check_shared_object(b"#!/bin/sh\n"), Err(ElfError::NotElf));
        assert_eq!(check_shared_object(&[]), Err(ElfError::NotElf));
        let mut b = good.clone();
        b[libc::EI_CLASS] = libc::ELFCLASS32;
        assert_eq!(check_shared_object(&b), Err(ElfError::WrongClass));
        let mut b = good.clone();
        b[offset_of!(Elf64_Ehdr, e_type)] = libc::ET_EXEC as u8;
        assert_eq!(check_shared_object(&b), Err(ElfError::NotSharedObject));
    }

    #[test]
    fn headers_pointing_outside_the_file_are_errors_not_panics() {
        let mut notes = note(NT_GNU_BUILD_ID, GNU_OWNER, &[1; 20]);
        notes[4] = 200; // descriptor size past the segment
        assert_eq!(build_id(&elf_with_notes(&notes)), Err(ElfError::Truncated));
        let mut b = elf_with_notes(&[]);
        let phoff = offset_of!(Elf64_Ehdr, e_phoff);
        b[phoff..phoff + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(build_id(&b), Err(ElfError::Truncated));
        let mut b = elf_with_notes(&[0; 12]);
        let filesz = size_of::<Elf64_Ehdr>() + offset_of!(Elf64_Phdr, p_filesz);
        b[filesz..filesz + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(build_id(&b), Err(ElfError::Truncated));
    }
}
