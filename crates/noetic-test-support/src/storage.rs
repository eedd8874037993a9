//! The conformance suite every [`StorageAdapter`] runs.

use noetic_core::adapter::{StorageAdapter, StorageOp};

/// Asserts the [`StorageAdapter`] contract on `store`, which must start empty: get/set/delete, `list`
/// by prefix in sorted order (`%` and `_` literal, non-ASCII keys, prefixes with no upper bound),
/// `get_many` in the order asked with gaps (a key asked twice answered twice), and `batch` applying
/// all its ops together, a key written twice keeping its last write.
///
/// # Panics
/// When the adapter breaks the contract or fails.
///
/// # Cancel safety
/// Not meant to be cancelled: a dropped run leaves test keys behind.
#[allow(clippy::unwrap_used)] // a test helper: a failure is a panic with the adapter's error
pub async fn storage_conformance(store: &dyn StorageAdapter) {
    // list: prefixes with no upper bound (empty, or all `char::MAX`) still list exactly their keys
    store.set("\u{10FFFF}/top", b"t".to_vec()).await.unwrap();
    store.set("conf/first", b"f".to_vec()).await.unwrap();
    // (The empty prefix lists every key, including any a store sharing the adapter keeps.)
    let all = store.list("").await.unwrap();
    assert!(all.is_sorted(), "{all:?}");
    assert!(all.iter().any(|key| key == "conf/first"), "{all:?}");
    assert_eq!(all.last().map(String::as_str), Some("\u{10FFFF}/top"));
    assert_eq!(
        store.list("\u{10FFFF}").await.unwrap(),
        vec!["\u{10FFFF}/top"]
    );
    store.delete("\u{10FFFF}/top").await.unwrap();
    store.delete("conf/first").await.unwrap();

    // get / set / delete
    assert_eq!(store.get("conf/a").await.unwrap(), None);
    store.set("conf/a", b"one".to_vec()).await.unwrap();
    assert_eq!(store.get("conf/a").await.unwrap(), Some(b"one".to_vec()));
    store.set("conf/a", b"two".to_vec()).await.unwrap();
    assert_eq!(store.get("conf/a").await.unwrap(), Some(b"two".to_vec()));
    store.delete("conf/a").await.unwrap();
    assert_eq!(store.get("conf/a").await.unwrap(), None);
    store
        .delete("conf/never-set")
        .await
        .expect("deleting a missing key is not an error");

    // list: prefix only, sorted
    for key in [
        "conf/list/b",
        "conf/list/a",
        "conf/list/c/d",
        "conf/lisz",
        "conf/lis",
    ] {
        store.set(key, key.as_bytes().to_vec()).await.unwrap();
    }
    assert_eq!(
        store.list("conf/list/").await.unwrap(),
        vec!["conf/list/a", "conf/list/b", "conf/list/c/d"]
    );
    assert_eq!(
        store.list("conf/lis").await.unwrap(),
        vec![
            "conf/lis",
            "conf/list/a",
            "conf/list/b",
            "conf/list/c/d",
            "conf/lisz"
        ]
    );
    assert!(store.list("conf/nothing/").await.unwrap().is_empty());

    // list: `%` and `_` are literal characters, not wildcards; non-ASCII keys sort bytewise
    for key in [
        "conf/wild/a%b",
        "conf/wild/axb",
        "conf/wild/a_c",
        "conf/wild/ayc",
        "conf/wild/é",
        "conf/wild/z",
    ] {
        store.set(key, key.as_bytes().to_vec()).await.unwrap();
    }
    assert_eq!(
        store.list("conf/wild/a%").await.unwrap(),
        vec!["conf/wild/a%b"]
    );
    assert_eq!(
        store.list("conf/wild/a_").await.unwrap(),
        vec!["conf/wild/a_c"]
    );
    assert_eq!(
        store.list("conf/wild/").await.unwrap(),
        vec![
            "conf/wild/a%b",
            "conf/wild/a_c",
            "conf/wild/axb",
            "conf/wild/ayc",
            "conf/wild/z",
            "conf/wild/é"
        ]
    );

    // get_many: in order, missing keys absent
    let keys = vec![
        "conf/list/b".to_owned(),
        "conf/missing".to_owned(),
        "conf/list/a".to_owned(),
    ];
    assert_eq!(
        store.get_many(&keys).await.unwrap(),
        vec![
            Some(b"conf/list/b".to_vec()),
            None,
            Some(b"conf/list/a".to_vec())
        ]
    );

    // batch: every op applied, in order, together
    store
        .batch(vec![
            StorageOp::set("conf/batch/x", b"1".to_vec()),
            StorageOp::set("conf/batch/y", b"2".to_vec()),
            StorageOp::delete("conf/list/a"),
            StorageOp::set("conf/batch/x", b"3".to_vec()),
        ])
        .await
        .unwrap();
    assert_eq!(
        store.get("conf/batch/x").await.unwrap(),
        Some(b"3".to_vec())
    );
    assert_eq!(
        store.get("conf/batch/y").await.unwrap(),
        Some(b"2".to_vec())
    );
    assert_eq!(store.get("conf/list/a").await.unwrap(), None);
    assert_eq!(
        store.list("conf/batch/").await.unwrap(),
        vec!["conf/batch/x", "conf/batch/y"]
    );
    store
        .batch(Vec::new())
        .await
        .expect("an empty batch is fine");

    // batch: a key written more than once keeps its last write; get_many answers a repeated key twice
    store
        .batch(vec![
            StorageOp::set("conf/twice/k", b"1".to_vec()),
            StorageOp::delete("conf/twice/k"),
            StorageOp::delete("conf/twice/j"),
            StorageOp::set("conf/twice/j", b"2".to_vec()),
            StorageOp::set("conf/twice/j", b"3".to_vec()),
        ])
        .await
        .unwrap();
    assert_eq!(store.get("conf/twice/k").await.unwrap(), None);
    assert_eq!(
        store.get("conf/twice/j").await.unwrap(),
        Some(b"3".to_vec())
    );
    let repeated = ["conf/twice/j", "conf/twice/k", "conf/twice/j"].map(str::to_owned);
    assert_eq!(
        store.get_many(&repeated).await.unwrap(),
        vec![Some(b"3".to_vec()), None, Some(b"3".to_vec())],
        "a key asked twice gets its value twice"
    );
}
