use super::*;
use crate::Workspace;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;

/// Objects in memory, counting puts and syncs.
#[derive(Default)]
struct Memory {
    objects: RefCell<HashMap<String, Vec<u8>>>,
    puts: RefCell<u64>,
    syncs: RefCell<u64>,
}

impl Objects for Memory {
    type Error = std::io::Error;
    fn has(&self, id: &str) -> Result<bool, std::io::Error> {
        Ok(self.objects.borrow().contains_key(id))
    }
    fn put(&self, id: &str, bytes: &[u8]) -> Result<(), std::io::Error> {
        assert_eq!(sha256_hex(bytes), id, "an object is named by its bytes");
        *self.puts.borrow_mut() += 1;
        self.objects.borrow_mut().insert(id.to_string(), bytes.to_vec());
        Ok(())
    }
    fn get(&self, id: &str) -> Result<Vec<u8>, std::io::Error> {
        self.objects.borrow().get(id).cloned().ok_or_else(|| std::io::Error::other(format!("no object {id}")))
    }
    fn sync(&self) -> Result<(), std::io::Error> {
        *self.syncs.borrow_mut() += 1;
        Ok(())
    }
}

fn mode(path: &std::path::Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

#[test]
fn a_call_that_edits_creates_deletes_and_chmods_is_seen_and_put_back_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fs::create_dir_all(root.join("src/deep")).unwrap();
    fs::write(root.join("src/a.rs"), "fn a() {}\n").unwrap();
    fs::write(root.join("src/deep/gone.txt"), "bye\n").unwrap();
    fs::write(root.join("run.sh"), "#!/bin/sh\n").unwrap();
    fs::write(root.join(".gitignore"), "target/\n").unwrap();
    fs::create_dir(root.join("target")).unwrap();
    fs::write(root.join("target/out.bin"), [0u8; 64]).unwrap();
    std::os::unix::fs::symlink("src/a.rs", root.join("link")).unwrap();
    let store = Memory::default();
    let mut snap = Snapshotter::new();
    let first = snap.snapshot(root, &store, u64::MAX, &|_| false).unwrap();
    assert_eq!(first.files, 5, "the ignored build output is not recorded: {first:?}");
    assert_eq!(first.read, 4, "a symlink is read as its target, not as a file");

    fs::write(root.join("src/a.rs"), "fn a() { b() }\n").unwrap();
    fs::write(root.join("src/new.rs"), "fn b() {}\n").unwrap();
    fs::remove_file(root.join("src/deep/gone.txt")).unwrap();
    fs::set_permissions(root.join("run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(root.join("target/out.bin"), [1u8; 64]).unwrap();
    let second = snap.snapshot(root, &store, u64::MAX, &|_| false).unwrap();
    assert_eq!(second.read, 3, "only the changed files are read again: {second:?}");

    let deltas = compare(&store, Some(&first.tree), &second.tree).unwrap();
    let changes: Vec<(&str, &str)> = deltas.iter().map(|d| (d.path.as_str(), d.change())).collect();
    assert_eq!(
        changes,
        [
            ("run.sh", "mode"),
            ("src/a.rs", "modified"),
            ("src/deep/gone.txt", "deleted"),
            ("src/new.rs", "added")
        ]
    );
    let (diff, counts) = unified(&store, &deltas).unwrap();
    assert!(diff.contains("-fn a() {}\n+fn a() { b() }\n"), "{diff}");
    assert!(diff.contains("old mode 100644\nnew mode 100755"), "{diff}");
    assert!(diff.contains("deleted file mode 100644"), "{diff}");
    assert_eq!(counts[1], Lines { added: 1, removed: 1, binary: false });

    let workspace = Workspace::new(root).unwrap();
    for delta in &deltas {
        assert_eq!(current::<std::io::Error>(&workspace, &delta.path).unwrap().state, delta.after.clone());
        restore(&workspace, &store, &delta.path, delta.before.as_ref()).unwrap();
    }
    assert_eq!(fs::read_to_string(root.join("src/a.rs")).unwrap(), "fn a() {}\n");
    assert_eq!(fs::read_to_string(root.join("src/deep/gone.txt")).unwrap(), "bye\n");
    assert!(!root.join("src/new.rs").exists());
    assert_eq!(mode(&root.join("run.sh")), 0o644);
    let third = snap.snapshot(root, &store, u64::MAX, &|_| false).unwrap();
    let back = compare(&store, Some(&first.tree), &third.tree).unwrap();
    assert!(back.is_empty(), "restored as the first checkpoint had it: {back:?}");
    assert_eq!(third.tree, first.tree, "the same files are the same checkpoint");
}

#[test]
fn a_checkpoint_after_one_change_stores_that_file_and_the_listings_above_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for d in 0..10 {
        fs::create_dir_all(root.join(format!("d{d}"))).unwrap();
        for f in 0..10 {
            fs::write(root.join(format!("d{d}/f{f}")), format!("{d} {f}\n")).unwrap();
        }
    }
    let store = Memory::default();
    let mut snap = Snapshotter::new();
    let first = snap.snapshot(root, &store, u64::MAX, &|_| false).unwrap();
    assert_eq!((first.files, first.stored), (100, 111), "100 files, 10 listings and the root");
    fs::write(root.join("d3/f3"), "changed\n").unwrap();
    let second = snap.snapshot(root, &store, u64::MAX, &|_| false).unwrap();
    assert_eq!((second.read, second.stored), (1, 3), "the file, its directory's listing and the root's");
    assert_eq!(*store.syncs.borrow(), 2, "one sync a checkpoint");
    let again = Snapshotter::new().snapshot(root, &store, u64::MAX, &|_| false).unwrap();
    assert_eq!(
        (again.read, again.stored, again.tree),
        (100, 0, second.tree),
        "a new snapshotter reads all, stores nothing"
    );
}

#[test]
fn past_the_budget_a_file_is_named_not_kept_and_a_restore_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fs::write(root.join("small"), "s").unwrap();
    fs::write(root.join("large"), vec![b'x'; 1000]).unwrap();
    let store = Memory::default();
    let mut snap = Snapshotter::new();
    let taken = snap.snapshot(root, &store, 100, &|_| false).unwrap();
    assert_eq!(taken.unkept, ["large"]);
    fs::write(root.join("large"), vec![b'y'; 1000]).unwrap();
    let after = snap.snapshot(root, &store, 100, &|_| false).unwrap();
    let deltas = compare(&store, Some(&taken.tree), &after.tree).unwrap();
    assert_eq!(deltas.len(), 1);
    let workspace = Workspace::new(root).unwrap();
    let refused = restore(&workspace, &store, "large", deltas[0].before.as_ref()).unwrap_err();
    assert!(refused.to_string().contains("large: its bytes were not kept"), "{refused}");
    assert_eq!(fs::read(root.join("large")).unwrap(), vec![b'y'; 1000], "nothing written");
}

#[test]
fn a_restore_replaces_a_planted_symlink_and_never_writes_through_it() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let root = dir.path();
    fs::write(root.join("f"), "mine\n").unwrap();
    let store = Memory::default();
    let mut snap = Snapshotter::new();
    let taken = snap.snapshot(root, &store, u64::MAX, &|_| false).unwrap();
    let entries = compare(&store, None, &taken.tree).unwrap();
    fs::write(outside.path().join("target"), "theirs\n").unwrap();
    fs::remove_file(root.join("f")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("target"), root.join("f")).unwrap();
    let workspace = Workspace::new(root).unwrap();
    restore(&workspace, &store, "f", entries[0].after.as_ref()).unwrap();
    assert_eq!(fs::read_to_string(outside.path().join("target")).unwrap(), "theirs\n");
    assert!(fs::symlink_metadata(root.join("f")).unwrap().is_file());
    assert_eq!(fs::read_to_string(root.join("f")).unwrap(), "mine\n");
}

#[test]
fn a_file_holding_a_secret_is_recorded_by_its_hash_alone_never_stored() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fs::write(root.join("deploy.env"), "TOKEN=tok-secret-123456\n").unwrap();
    fs::write(root.join("plain.txt"), "nothing\n").unwrap();
    let store = Memory::default();
    let secret = |bytes: &[u8]| bytes.windows(6).any(|w| w == b"secret");
    let taken = Snapshotter::new().snapshot(root, &store, u64::MAX, &secret).unwrap();
    assert_eq!(taken.unkept, ["deploy.env"]);
    assert!(
        store.objects.borrow().values().all(|bytes| !bytes.windows(6).any(|w| w == b"secret")),
        "no object holds the secret"
    );
    let files = compare(&store, None, &taken.tree).unwrap();
    assert!(files.iter().any(|f| f.path == "deploy.env" && f.after.as_ref().is_some_and(|s| s.unkept)));
}

#[test]
fn a_name_that_is_not_utf8_is_recorded_and_put_back_byte_for_byte() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let name = OsStr::from_bytes(b"r\xe9sum\xe9.txt");
    let sub = OsStr::from_bytes(b"d\xff");
    fs::write(root.join("plain.txt"), "plain\n").unwrap();
    let store = Memory::default();
    let mut snap = Snapshotter::new();
    let first = snap.snapshot(root, &store, u64::MAX, &|_| false).unwrap();
    // A command makes a file and a directory whose names are Latin-1, and a name that sorts
    // differently as bytes and as text beside them.
    fs::write(root.join(name), "old bytes\n").unwrap();
    fs::create_dir(root.join(sub)).unwrap();
    fs::write(root.join(sub).join(name), "deep\n").unwrap();
    fs::write(root.join("\u{e9}.txt"), "text\n").unwrap();
    let second = snap.snapshot(root, &store, u64::MAX, &|_| false).unwrap();
    assert_eq!(second.files, 4, "{second:?}");
    let deltas = compare(&store, Some(&first.tree), &second.tree).unwrap();
    let mut paths: Vec<String> = deltas.iter().map(|d| d.path.clone()).collect();
    paths.sort();
    let mut expected = vec![
        agentd_protocol::path_name::encode(b"d\xff/r\xe9sum\xe9.txt"),
        agentd_protocol::path_name::encode(b"r\xe9sum\xe9.txt"),
        "\u{e9}.txt".to_string(),
    ];
    expected.sort();
    assert_eq!(paths, expected);
    // Put back: each file the command made is removed, by its own bytes.
    let workspace = Workspace::new(root).unwrap();
    for delta in &deltas {
        assert_eq!(current::<std::io::Error>(&workspace, &delta.path).unwrap().state, delta.after.clone());
        restore(&workspace, &store, &delta.path, delta.before.as_ref()).unwrap();
    }
    assert!(!root.join(name).exists() && !root.join(sub).exists());
    // And one changed is put back as it was, name and bytes.
    fs::write(root.join(name), "old bytes\n").unwrap();
    let third = snap.snapshot(root, &store, u64::MAX, &|_| false).unwrap();
    fs::write(root.join(name), "new bytes\n").unwrap();
    let fourth = snap.snapshot(root, &store, u64::MAX, &|_| false).unwrap();
    let deltas = compare(&store, Some(&third.tree), &fourth.tree).unwrap();
    assert_eq!(deltas.len(), 1);
    restore(&workspace, &store, &deltas[0].path, deltas[0].before.as_ref()).unwrap();
    assert_eq!(fs::read_to_string(root.join(name)).unwrap(), "old bytes\n");
}

#[test]
fn special_files_are_named_never_held_and_hard_links_are_listed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    fs::create_dir(&root).unwrap();
    fs::write(root.join("a.txt"), "a\n").unwrap();
    // A file of the workspace with a second name outside it.
    fs::write(root.join("shared.txt"), "shared\n").unwrap();
    fs::hard_link(root.join("shared.txt"), dir.path().join("outside.txt")).unwrap();
    let store = Memory::default();
    let mut snap = Snapshotter::new();
    let first = snap.snapshot(&root, &store, u64::MAX, &|_| false).unwrap();
    let surveyed = survey(&root).unwrap();
    assert_eq!(surveyed.linked.iter().map(|l| l.path.as_str()).collect::<Vec<_>>(), ["shared.txt"]);
    assert!(surveyed.linked[0].why.starts_with("1 other hard link"), "{:?}", surveyed.linked);

    let status = std::process::Command::new("mkfifo").arg(root.join("pipe")).status().unwrap();
    assert!(status.success());
    let _socket = std::os::unix::net::UnixListener::bind(root.join("app.sock")).unwrap();
    let second = snap.snapshot(&root, &store, u64::MAX, &|_| false).unwrap();
    assert_eq!(second.files, first.files + 2, "{second:?}");
    let surveyed = survey(&root).unwrap();
    let specials: Vec<(&str, &str)> =
        surveyed.specials.iter().map(|n| (n.path.as_str(), n.why.split(':').next().unwrap())).collect();
    assert_eq!(specials, [("app.sock", "a socket"), ("pipe", "a FIFO")]);
    let deltas = compare(&store, Some(&first.tree), &second.tree).unwrap();
    let changes: Vec<(&str, &str, Option<&str>)> = deltas
        .iter()
        .map(|d| (d.path.as_str(), d.change(), d.after.as_ref().and_then(|a| a.special())))
        .collect();
    assert_eq!(changes, [("app.sock", "added", Some("a socket")), ("pipe", "added", Some("a FIFO"))]);
    let (diff, counts) = unified(&store, &deltas).unwrap();
    assert!(diff.contains("diff --git a/pipe b/pipe\nadded a FIFO: a checkpoint records its name"), "{diff}");
    assert!(counts.iter().all(|c| c.binary));
    // What stands there now is what was recorded; putting back "absent" removes it; putting one
    // back is refused, naming what it was.
    let workspace = Workspace::new(&root).unwrap();
    let pipe = deltas.iter().find(|d| d.path == "pipe").unwrap();
    assert_eq!(current::<std::io::Error>(&workspace, "pipe").unwrap().state, pipe.after.clone());
    restore(&workspace, &store, "pipe", None).unwrap();
    assert!(!root.join("pipe").exists());
    let e = restore(&workspace, &store, "pipe", pipe.after.as_ref()).unwrap_err();
    assert!(e.to_string().contains("it was a FIFO"), "{e}");
    let links = |path: &str| current::<std::io::Error>(&workspace, path).unwrap().links;
    assert_eq!(links("shared.txt"), 2);
    assert_eq!(links("a.txt"), 1);
    assert_eq!(links("missing"), 0);
}
