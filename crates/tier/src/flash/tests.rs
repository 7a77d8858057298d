use std::path::{Path, PathBuf};
use std::process::Command;

use testkit::ScratchDir;

use super::*;

const MIB: u64 = 1024 * 1024;

fn spec(path: &Path, size_bytes: u64) -> FlashSpec {
    FlashSpec {
        path: path.to_path_buf(),
        size_bytes,
    }
}

/// What an engine's vet would say: blank, or a device whose first block it wrote (its
/// segments' magic; `tier` does not know the format, its opener does).
fn ours(contents: FlashContents<'_>) -> Result<(), String> {
    match contents {
        FlashContents::Blank => Ok(()),
        FlashContents::Data(first) if first.starts_with(MAGIC) => Ok(()),
        FlashContents::Data(_) => Err("not a fogcached flash device".to_string()),
    }
}

const MAGIC: &[u8] = b"FOGSEG01";

fn open(spec: &FlashSpec) -> Result<FlashDevice, FlashError> {
    FlashDevice::open(spec, &ours)
}

fn magic_block() -> AlignedBuf {
    let mut block = AlignedBuf::zeroed(4096);
    block.as_mut_slice()[..MAGIC.len()].copy_from_slice(MAGIC);
    block
}

fn filled(len: usize, byte: u8) -> AlignedBuf {
    let mut buf = AlignedBuf::zeroed(len);
    buf.as_mut_slice().fill(byte);
    buf
}

#[test]
fn a_new_file_is_sized_and_reserved_and_reads_back_what_was_written() {
    let dir = ScratchDir::new("flash-file");
    let path = dir.path().join("flash");
    let device = open(&spec(&path, 4 * MIB)).expect("open");
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.len(), 4 * MIB);
    assert!(
        std::os::unix::fs::MetadataExt::blocks(&meta) * 512 >= 4 * MIB,
        "its blocks are reserved"
    );
    assert_eq!(FlashIo::size_bytes(&device), 4 * MIB);
    device.write_at(MIB, &filled(8192, 0xA5)).unwrap();
    device
        .write_at(3 * MIB + 4096, &filled(4096, 0x5A))
        .unwrap();
    let mut back = AlignedBuf::zeroed(8192);
    device.read_at(MIB, &mut back).unwrap();
    assert!(back.as_slice().iter().all(|&b| b == 0xA5));
    device.read_at(3 * MIB, &mut back).unwrap();
    assert!(back.as_slice()[..4096].iter().all(|&b| b == 0));
    assert!(back.as_slice()[4096..].iter().all(|&b| b == 0x5A));
}

#[test]
fn direct_io_is_used_where_the_file_system_allows_it() {
    let dir = ScratchDir::new("flash-direct");
    let device = open(&spec(&dir.path().join("flash"), MIB)).expect("open");
    let file_system = crate::file_system_at(dir.path());
    if file_system.name == "ext2/3/4" || file_system.name == "xfs" {
        assert!(device.direct_io(), "{:?}", device.why_buffered());
    }
    // tmpfs takes O_DIRECT since Linux 6.6; before, the open falls back and says so.
    let shm = Path::new("/dev/shm");
    if shm.is_dir() && crate::file_system_at(shm).name == "tmpfs" {
        let path = shm.join(format!("fogcached-flash-test-{}", std::process::id()));
        let _cleanup = RemoveOnDrop(path.clone());
        let device = open(&spec(&path, MIB)).expect("open on tmpfs");
        if let Some(why) = device.why_buffered() {
            assert!(why.contains("tmpfs") && why.contains("O_DIRECT"), "{why}");
        }
        device.write_at(0, &filled(4096, 3)).unwrap();
        let mut back = AlignedBuf::zeroed(4096);
        device.read_at(0, &mut back).unwrap();
        assert!(back.as_slice().iter().all(|&b| b == 3));
    }
}

#[test]
fn a_file_system_that_refuses_o_direct_gets_buffered_io_and_the_reason() {
    let dir = ScratchDir::new("flash-buffered");
    let path = dir.path().join("flash");
    let opened_direct = std::cell::Cell::new(false);
    let (file, why) = super::device::choose_direct_or_buffered(&path, false, |direct| {
        if direct {
            opened_direct.set(true);
            // What such a file system answers.
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
    })
    .expect("the buffered open");
    assert!(opened_direct.get(), "O_DIRECT was tried first");
    let why = why.expect("a buffered open says why");
    assert!(why.contains("does not support O_DIRECT"), "{why}");
    assert!(why.contains("page cache"), "{why}");
    drop(file);
    // Any other error is the open's failure, not a fallback.
    let error = super::device::choose_direct_or_buffered(&path, false, |_| {
        Err(std::io::Error::from_raw_os_error(libc::EACCES))
    })
    .unwrap_err();
    assert!(matches!(error, FlashError::Open { .. }), "{error}");
}

struct RemoveOnDrop(PathBuf);
impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn misaligned_or_out_of_range_io_is_refused_before_it_reaches_the_device() {
    let dir = ScratchDir::new("flash-range");
    let device = open(&spec(&dir.path().join("flash"), MIB)).unwrap();
    let buf = filled(4096, 1);
    for offset in [1, 512, MIB, MIB - 2048, u64::MAX - 4095] {
        let error = device.write_at(offset, &buf).unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput, "{offset}");
    }
    let mut big = AlignedBuf::zeroed(8192);
    assert!(device.read_at(MIB - 4096, &mut big).is_err());
}

#[test]
fn a_second_server_on_the_same_file_is_refused_until_the_first_lets_go() {
    let dir = ScratchDir::new("flash-lock");
    let path = dir.path().join("flash");
    let first = open(&spec(&path, MIB)).unwrap();
    let error = open(&spec(&path, MIB)).unwrap_err();
    assert!(matches!(error, FlashError::InUse { .. }), "{error}");
    assert!(
        error.to_string().contains("in use by another process"),
        "{error}"
    );
    first.write_at(0, &magic_block()).unwrap();
    drop(first);
    open(&spec(&path, MIB)).expect("free again");
}

#[test]
fn sizes_and_paths_the_flash_tier_cannot_use_are_refused_with_the_reason() {
    let dir = ScratchDir::new("flash-refuse");
    for size in [0, 4095, MIB + 1] {
        let error = open(&spec(&dir.path().join("f"), size)).unwrap_err();
        assert!(
            matches!(error, FlashError::BadSize { .. }),
            "{size}: {error}"
        );
    }
    let error = open(&spec(dir.path(), MIB)).unwrap_err();
    assert!(error.to_string().contains("a directory"), "{error}");
    let error = open(&spec(Path::new("/dev/null"), MIB)).unwrap_err();
    assert!(error.to_string().contains("a character device"), "{error}");
    assert!(error.to_string().contains("--slow-path"), "{error}");
}

#[test]
fn an_existing_larger_file_keeps_its_bytes() {
    let dir = ScratchDir::new("flash-keep");
    let path = dir.path().join("flash");
    {
        let device = open(&spec(&path, 2 * MIB)).unwrap();
        device.write_at(0, &magic_block()).unwrap();
        device.write_at(MIB + 4096, &filled(4096, 9)).unwrap();
    }
    let device = open(&spec(&path, MIB)).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 2 * MIB);
    drop(device);
    let device = open(&spec(&path, 2 * MIB)).unwrap();
    let mut back = AlignedBuf::zeroed(4096);
    device.read_at(MIB + 4096, &mut back).unwrap();
    assert!(back.as_slice().iter().all(|&b| b == 9));
}

#[test]
fn a_file_deleted_or_truncated_under_the_server_is_noticed_and_reads_past_its_end_fail() {
    let dir = ScratchDir::new("flash-intact");
    let path = dir.path().join("flash");
    let device = open(&spec(&path, MIB)).unwrap();
    device.check_intact().expect("intact at first");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(MIB / 2)
        .unwrap();
    let error = device.check_intact().unwrap_err();
    assert!(matches!(error, FlashError::Truncated { len_bytes, .. } if len_bytes == MIB / 2));
    let mut back = AlignedBuf::zeroed(4096);
    let read = device.read_at(MIB - 4096, &mut back).unwrap_err();
    assert_eq!(read.kind(), std::io::ErrorKind::UnexpectedEof);
    std::fs::remove_file(&path).unwrap();
    let error = device.check_intact().unwrap_err();
    assert!(matches!(error, FlashError::Deleted { .. }), "{error}");
    assert!(error.to_string().contains("was deleted"), "{error}");
}

/// A loop device over a file in a scratch directory, detached on drop.
struct LoopDevice {
    device: PathBuf,
    _dir: ScratchDir,
}

impl LoopDevice {
    fn new(size_bytes: u64) -> Option<LoopDevice> {
        let dir = ScratchDir::new("flash-loop");
        let backing = dir.path().join("backing");
        std::fs::File::create(&backing)
            .unwrap()
            .set_len(size_bytes)
            .unwrap();
        let out = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&backing)
            .output()
            .ok()?;
        if !out.status.success() {
            return None;
        }
        let device = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        Some(LoopDevice { device, _dir: dir })
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.device).status();
    }
}

#[test]
fn a_block_device_is_used_whole_refused_when_smaller_than_asked_and_held_exclusively() {
    let name = "a_block_device_is_used_whole_refused_when_smaller_than_asked_and_held_exclusively";
    let Some(device) = LoopDevice::new(2 * MIB) else {
        testkit::skip!(name, "no loop device here (losetup failed: not root?)");
        return;
    };
    let error = open(&spec(&device.device, 4 * MIB)).unwrap_err();
    assert!(
        matches!(
            error,
            FlashError::TooSmall {
                device_bytes,
                size_bytes,
                ..
            } if device_bytes == 2 * MIB && size_bytes == 4 * MIB
        ),
        "{error}"
    );
    assert!(error.to_string().contains("lower --flash-size"), "{error}");
    let flash = open(&spec(&device.device, 2 * MIB)).expect("open the loop device");
    assert!(flash.is_block_device());
    flash.check_intact().unwrap();
    let error = open(&spec(&device.device, MIB)).unwrap_err();
    assert!(matches!(error, FlashError::InUse { .. }), "{error}");
    flash.write_at(MIB, &filled(4096, 0x77)).unwrap();
    let mut back = AlignedBuf::zeroed(4096);
    flash.read_at(MIB, &mut back).unwrap();
    assert!(back.as_slice().iter().all(|&b| b == 0x77));
}

#[test]
fn injected_faults_fail_the_chosen_operations_as_often_as_asked_and_no_others() {
    let dir = ScratchDir::new("flash-fault");
    let device = open(&spec(&dir.path().join("flash"), MIB)).unwrap();
    let io = FaultyIo::new(device);
    io.write_at(0, &filled(8192, 1)).unwrap();
    io.fail(IoOp::Read, 4096..8192, Some(2));
    io.fail(IoOp::Write, 65536..65537, None);
    let mut back = AlignedBuf::zeroed(8192);
    // A read that touches the range fails twice, then succeeds.
    for _ in 0..2 {
        let error = io.read_at(0, &mut back).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EIO));
    }
    io.read_at(0, &mut back).unwrap();
    assert!(back.as_slice().iter().all(|&b| b == 1));
    // Writes elsewhere pass; writes over the byte always fail, until healed.
    io.write_at(0, &filled(4096, 2)).unwrap();
    for _ in 0..3 {
        assert!(io.write_at(65536, &filled(4096, 2)).is_err());
    }
    assert_eq!(io.injected(), 5);
    io.heal();
    io.write_at(65536, &filled(4096, 2)).unwrap();
    let mut one = AlignedBuf::zeroed(4096);
    io.inner().read_at(65536, &mut one).unwrap();
    assert!(one.as_slice().iter().all(|&b| b == 2));
}

#[test]
fn a_path_to_someone_elses_file_is_refused_and_left_as_it_was() {
    let dir = ScratchDir::new("flash-foreign");
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, b"not a cache\n").unwrap();
    let before = std::fs::read(&path).unwrap();
    let error = open(&spec(&path, MIB)).unwrap_err();
    assert!(matches!(error, FlashError::Refused { .. }), "{error}");
    assert!(error.to_string().contains("nothing was changed"), "{error}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the file was changed"
    );
    // Data past a first block of zeros is someone's too.
    let sparse = dir.path().join("sparse");
    let file = std::fs::File::create(&sparse).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, b"x", 3 * 4096).unwrap();
    drop(file);
    assert!(matches!(
        open(&spec(&sparse, MIB)).unwrap_err(),
        FlashError::Refused { .. }
    ));
    assert_eq!(std::fs::metadata(&sparse).unwrap().len(), 3 * 4096 + 1);
    // A file of zeros is blank; one whose first block is the opener's is its own.
    let zeros = dir.path().join("zeros");
    std::fs::write(&zeros, vec![0u8; 10_000]).unwrap();
    open(&spec(&zeros, MIB)).expect("zeros are blank");
    let shown = std::cell::Cell::new(false);
    let vet = |contents: FlashContents<'_>| {
        shown.set(matches!(contents, FlashContents::Data(first) if first.starts_with(MAGIC)));
        Ok(())
    };
    let mine = dir.path().join("mine");
    open(&spec(&mine, MIB))
        .unwrap()
        .write_at(0, &magic_block())
        .unwrap();
    FlashDevice::open(&spec(&mine, MIB), &vet).expect("its own");
    assert!(shown.get(), "the vet saw the first block");
}
