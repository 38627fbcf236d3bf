//! Overflow of a stored value is refused, never stored wrapped: a call
//! whose arithmetic leaves its column's type answers SQLSTATE 22003 and
//! rolls back, and the data set stays consistent (issue 29, item 3).

use std::process::Command;

use super::serve::{code, connect, runtime, sigterm, simple_one, spawn_serve, temp};

#[test]
fn an_overflowing_tpcb_call_answers_22003_and_islands_check_passes() {
    let dir = temp("overflow-tpcb");
    let d = dir.to_str().unwrap();
    let (mut child, addr, _) = spawn_serve(&["--init", "tpcb", "--scale", "1", "--data-dir", d]);
    runtime().block_on(async {
        let c = connect(addr).await.unwrap();
        c.simple_query("CALL tpcb(1, 1, 1, 9223372036854775807)")
            .await
            .unwrap();
        let e = c
            .simple_query("CALL tpcb(1, 1, 1, 1)")
            .await
            .expect_err("an overflowing balance must not be acknowledged");
        assert_eq!(code(&e), "22003", "{e:?}");
        let msg = e.as_db_error().map(|d| d.message().to_string());
        assert!(
            msg.as_deref().is_some_and(|m| m.contains("balance")),
            "the message names the column: {msg:?}"
        );
        // Rolled back: the balance is the one acknowledged, and the
        // connection goes on.
        assert_eq!(
            simple_one(&c, "CALL tpcb_balance(1)").await,
            i64::MAX.to_string()
        );
        let e = c
            .simple_query("CALL tpcb(2, 2, 1, 1)")
            .await
            .expect_err("the teller and branch are at the maximum too");
        assert_eq!(code(&e), "22003", "{e:?}");
        assert_eq!(simple_one(&c, "CALL tpcb_balance(2)").await, "0");
    });
    sigterm(&mut child);
    assert_eq!(child.take().wait().unwrap().code(), Some(0));
    let out = Command::new(env!("CARGO_BIN_EXE_islands"))
        .args(["check", "--log-dir", d])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("consistent"),
        "islands check after the refused overflow: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
