//! C-TLS-3: the PROXY protocol parser on arbitrary bytes, whole and split.

use std::net::{IpAddr, SocketAddr};

use weir_core::proxy_proto::{self, Accept, MAX_LEN, Parse};

pub fn run(data: &[u8]) {
    let Some((&ctl, bytes)) = data.split_first() else {
        return;
    };
    let accept = match ctl % 3 {
        0 => Accept::V1,
        1 => Accept::V2,
        _ => Accept::Any,
    };
    let whole = proxy_proto::parse(bytes, accept);
    if let Ok(Parse::Complete(h)) = whole {
        assert!(
            h.len <= bytes.len() && h.len <= MAX_LEN,
            "a header within its input and bound"
        );
        // The header alone parses to the same header: what follows it is the client's.
        assert_eq!(proxy_proto::parse(&bytes[..h.len], accept), whole);
        // Every shorter prefix is incomplete (bytes may arrive split anywhere).
        let cut = usize::from(ctl) % h.len.max(1);
        assert_eq!(
            proxy_proto::parse(&bytes[..cut], accept),
            Ok(Parse::Incomplete)
        );
        // The sender's side (`send_proxy_protocol`): what weir would write for this source
        // reads back as it (an IPv4-mapped address as IPv4).
        if let Some(src) = h.source {
            let want = match src {
                SocketAddr::V6(a) => a
                    .ip()
                    .to_ipv4_mapped()
                    .map_or(src, |ip| SocketAddr::new(IpAddr::V4(ip), a.port())),
                SocketAddr::V4(_) => src,
            };
            let sent = proxy_proto::encode(h.version, src, src);
            match proxy_proto::parse(sent.as_bytes(), Accept::Any) {
                Ok(Parse::Complete(back)) => {
                    assert_eq!((back.source, back.len), (Some(want), sent.as_bytes().len()));
                }
                other => panic!("an encoded header did not parse: {other:?}"),
            }
        }
    }
    if let Ok(Parse::Incomplete) = whole {
        assert!(bytes.len() < MAX_LEN, "an incomplete header is bounded");
    }
}
