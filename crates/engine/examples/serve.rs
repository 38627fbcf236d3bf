//! An application's own procedures served over the PostgreSQL wire
//! protocol: a catalog of counters, `islands::server::serve`, and `psql`.
//!
//! ```sh
//! cargo run --release -p islands --example serve      # then, in another shell:
//! psql -h 127.0.0.1 -p 5434 -c "CALL bump(7, 5)" -c "SELECT * FROM counter(7)"
//! ```
//!
//! It serves until its standard input closes (Ctrl-D), then shuts down:
//! the calls in flight are answered, and the deployment is stopped.

use std::io::Read;

use islands::api::{Catalog, Deployment, Options, Partition, ProcDef, Type, Value};
use islands::deploy::{DeploySpec, Islands};
use islands::server::{serve, ServerOptions};
use islands::storage::{Col, ColType, PrimaryKind, TableDef};
use islands::Abort;

const COUNTERS: u64 = 1000;

fn main() -> Result<(), islands::Error> {
    let mut catalog = Catalog::new();
    let counters = catalog.table(
        TableDef::new(
            "counters",
            &[("value", ColType::I64)],
            COUNTERS,
            PrimaryKind::Hash,
        ),
        Partition::BySite(|key| (key % 16) as u32),
    );
    catalog.procedure(
        ProcDef::new("bump", move |tx, args, out| {
            Box::pin(async move {
                let key = u64::try_from(args.int(0)).map_err(|_| Abort::User("no such counter"))?;
                let h = tx
                    .get_for_update(counters, key)
                    .await?
                    .ok_or(Abort::User("no such counter"))?;
                let v = tx.row(h).i64(Col(0)) + args.int(1);
                tx.row_mut(h).set_i64(Col(0), v);
                out.push(vec![Value::Int(v)]);
                Ok(())
            })
        })
        .param("key", Type::Int)
        .param("by", Type::Int)
        .column("value", Type::Int)
        .home_by(0, counters),
    )?;
    catalog.procedure(
        ProcDef::new("counter", move |tx, args, out| {
            Box::pin(async move {
                let key = u64::try_from(args.int(0)).map_err(|_| Abort::User("no such counter"))?;
                let h = tx
                    .get(counters, key)
                    .await?
                    .ok_or(Abort::User("no such counter"))?;
                out.push(vec![Value::Int(tx.row(h).i64(Col(0)))]);
                Ok(())
            })
        })
        .param("key", Type::Int)
        .column("value", Type::Int)
        .home_by(0, counters),
    )?;
    let mut spec = DeploySpec::new(Islands::Count(2));
    spec.workers_per_island = Some(1);
    spec.durability = "off".into();
    let mut opts = Options::new(spec);
    opts.pin = false;
    let db = Deployment::open(opts, catalog, |load| {
        for key in 0..COUNTERS {
            if load.owns(counters, key) {
                load.put(counters, key, |r| r.set_i64(Col(0), 0))?;
            }
        }
        Ok(())
    })?;
    let server = serve(
        db,
        ServerOptions {
            listen: "127.0.0.1:5434".parse().expect("an address"),
            ..ServerOptions::default()
        },
    )?;
    println!(
        "serving on {} until standard input closes",
        server.local_addr()
    );
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    server.shutdown()
}
