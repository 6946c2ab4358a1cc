//! C-PATH-8 on smol: shutting down the write side of a connection to an `https` backend (what a
//! tunnel does when its client half-closes) ends the TLS session with `close_notify` *and* the
//! TCP write side with a FIN, as on tokio; the connection stays open for reading.

use std::future::poll_fn;
use std::io::{Read, Write};

use std::net::{SocketAddr, TcpListener};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use hyper::rt::{Read as _, ReadBuf, Write as _};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use weir_proxy::rt::TlsConnect;

/// What the TLS peer saw: the bytes before `close_notify`, and whether the raw socket then read
/// an end of stream (a FIN) rather than timing out.
struct Seen {
    data: Vec<u8>,
    fin: bool,
}

fn tls_peer(
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
) -> (SocketAddr, std::thread::JoinHandle<Seen>) {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .expect("server config");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let peer = std::thread::spawn(move || {
        let (sock, _) = listener.accept().expect("accept");
        sock.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        let conn = rustls::ServerConnection::new(Arc::new(config)).expect("server conn");
        let mut tls = rustls::StreamOwned::new(conn, sock);
        let mut data = Vec::new();
        // Ends cleanly at the client's close_notify.
        tls.read_to_end(&mut data).expect("read until close_notify");
        // Nothing follows close_notify on the wire but the FIN.
        let mut byte = [0u8; 1];
        let fin = matches!(tls.sock.read(&mut byte), Ok(0));
        // Half-close: this side still answers, and the client still reads it.
        tls.write_all(b"bye")
            .expect("write after the client's close");
        tls.conn.send_close_notify();
        tls.flush().expect("flush");
        Seen { data, fin }
    });
    (addr, peer)
}

#[test]
fn c_path_8_tls_shutdown_sends_close_notify_and_fin() {
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .expect("params")
        .self_signed(&key)
        .expect("cert");
    let der = cert.der().clone();
    let (addr, peer) = tls_peer(
        der.clone(),
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    );

    let mut roots = rustls::RootCertStore::empty();
    roots.add(der).expect("root");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let client = Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth(),
    );

    let rt = weir_smol::rt();
    let mut after_close = Vec::new();
    rt.0.block_on(Box::pin(async {
        let tcp = rt.0.connect(addr).await.expect("connect");
        let name = ServerName::try_from("localhost").expect("name");
        let mut io =
            rt.0.tls_connect(TlsConnect::new(client, name, tcp))
                .await
                .expect("handshake");
        let n = poll_fn(|cx| Pin::new(&mut io).poll_write(cx, b"hello"))
            .await
            .expect("write");
        assert_eq!(n, 5);
        poll_fn(|cx| Pin::new(&mut io).poll_flush(cx))
            .await
            .expect("flush");
        poll_fn(|cx| Pin::new(&mut io).poll_shutdown(cx))
            .await
            .expect("shutdown");
        // Our write side is shut; the read side still takes what the peer sends.
        loop {
            let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 64];
            let mut rb = ReadBuf::uninit(&mut buf);
            poll_fn(|cx| Pin::new(&mut io).poll_read(cx, rb.unfilled()))
                .await
                .expect("read after our close");
            if rb.filled().is_empty() {
                break;
            }
            after_close.extend_from_slice(rb.filled());
        }
    }))
    .expect("block_on");

    let seen = peer.join().expect("peer");
    assert_eq!(seen.data, b"hello");
    assert!(
        seen.fin,
        "the TCP write side was not shut after close_notify (no FIN within 2 s)"
    );
    assert_eq!(
        after_close, b"bye",
        "the read side stays open after our half-close"
    );
}
