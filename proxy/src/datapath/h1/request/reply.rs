//! How a request ends towards the client: weir's own answer, or the backend's response
//! delivered (head rewritten, body relayed, the slot released before the last bytes, C-LOAD-1),
//! and whether the connection stays open.

use super::*;
use weir_core::idle_pool;

impl Req<'_> {
    /// weir's own response (C-PATH-11, C-OBS-4), with `X-Request-ID` and the rate headers of an
    /// allowed request (C-RATE-1).
    pub(super) async fn answer(&mut self, c: &mut DownstreamConn, a: Answer) -> bool {
        let status = a.status();
        let mut extra = Extra::new(std::mem::take(&mut c.scratch));
        let x = self.exchange();
        let rid = x.request_id().as_bytes();
        // On the wire, the synthetic response's own status (`200` in the gRPC form, C-GRPC-3).
        let mut wire = status;
        let body: Cow<'static, str> = match (a.health_body(), x.synthetic(&a)) {
            (Some(b), _) => {
                extra.set_bytes(header::CONTENT_TYPE, weir_core::response::JSON.as_bytes());
                Cow::Borrowed(b)
            }
            (None, Some(s)) => {
                wire = s.status();
                for (name, value) in s.headers() {
                    extra.set(name, |out| push_text(out, &value));
                }
                Cow::Owned(s.body())
            }
            (None, None) => Cow::Borrowed(""),
        };
        extra.set_bytes(header::REQUEST_ID, rid);
        // Folded (`for_each`), not stepped through the chain one `next` at a time.
        x.response_headers(None, status)
            .for_each(|(name, value)| extra.set(name, |out| push_text(out, &value)));
        let close = extra.has(header::CONNECTION);
        // The rest of the engine's outputs (record, gate hand-off) are side effects.
        let _ = self.next();
        let keep = !close && self.keep_alive();
        c.out.clear();
        status_line(&mut c.out, wire);
        extra.with_pairs(|pairs| {
            for (name, value) in pairs {
                if !name.eq_ignore_ascii_case(header::CONNECTION) {
                    line(&mut c.out, name.as_bytes(), value);
                }
            }
        });
        c.scratch = extra.into_scratch();
        line(
            &mut c.out,
            b"content-length",
            body.len().to_string().as_bytes(),
        );
        connection_line(&mut c.out, keep, self.head.version);
        c.out.extend_from_slice(b"\r\n");
        let body_len = if self.head.is_head() {
            0
        } else {
            c.out.extend_from_slice(body.as_bytes());
            body.len() as u64
        };
        let out = std::mem::take(&mut c.out);
        let ok = write_all(&mut c.io, &out).await.is_ok();
        c.out = out;
        self.log_line(if ok { body_len } else { 0 });
        ok && keep
    }

    /// Whether the client connection can carry another request after this one: the client
    /// allows it, weir is not shutting down, and the request body was read to its end.
    pub(super) fn keep_alive(&self) -> bool {
        self.head
            .persists(self.shutdown.get(), self.reader.is_done())
    }

    /// Pass a backend response on (C-RETRY-4, C-PATH-4, C-PATH-6, C-PATH-7) or tunnel an
    /// upgrade (C-PATH-8).
    /// `last` is the attempt's response, lent (not moved); its connection is taken
    /// from it to be released or tunnelled.
    pub(super) async fn deliver(
        &mut self,
        c: &mut DownstreamConn,
        d: &Delivery,
        last: &mut Option<Up>,
    ) -> bool {
        let _ = self.next();
        let Some(up) = last.as_mut() else {
            return self
                .answer(c, Answer::Client(ClientError::Incomplete))
                .await;
        };
        let keep = self.keep_alive();
        let rctx = ResponseContext {
            head: self.head.is_head(),
            upgrade: self.exchange().upgrade_requested(),
        };
        // The exchange is the response's from here (borrowed in place, not moved out: 1.5 KB).
        let data_plane = self.data_plane;
        let Some(x) = self.exchange.as_mut() else {
            return false;
        };
        self.delivered = true;
        let client = ClientSide {
            version: self.head.version,
            keep_alive: keep,
        };
        let written = write_head(x, d, up, &self.kept, (rctx, client), c);
        let Some((out, framing, reusable)) = written else {
            finish(data_plane, x, BodyEnd::Error);
            return false;
        };
        up.conn.buf.consume(up.info.head_len);
        // The streamed request body, if the backend answered before it was all sent: it goes
        // on beside the response; an upstream connection whose request was not sent whole is
        // not reused.
        let mut pump = up.pump.take();
        if out.body == BodyOut::Tunnel && pump.as_ref().is_some_and(Pump::is_sending) {
            // A switch of protocols before the request's own body ended: no byte stream to
            // join them at; both connections close.
            finish(data_plane, x, BodyEnd::Error);
            return false;
        }
        if out.body == BodyOut::Tunnel {
            // The line is written when the 101 is sent on (tunnelled bytes are not counted).
            self.log_line(0);
            let (Some(x), Some(up)) = (self.exchange.take(), last.take()) else {
                return false;
            };
            tunnel(data_plane, c, up.conn, x).await;
            return false;
        }
        let mut reader = Reader::new(framing);
        let pass = out.body == BodyOut::PassChunked;
        let mut sent = 0;
        let complete = {
            let mut w = std::mem::take(&mut c.out);
            let cap = c.cap();
            let side = pump.as_mut().map(|pump| PumpSide {
                pump,
                reader: &mut self.reader,
                sent: &mut self.body_bytes,
            });
            let relay = relay::relay(
                (&mut up.conn.io, &mut up.conn.buf),
                &mut reader,
                pass,
                (&mut c.io, &mut c.buf, cap),
                side,
                &mut w,
                &mut sent,
            );
            let end = stream_body(data_plane, x, pin!(relay)).await;
            // The end is reported before the last bytes are written (C-LOAD-1: the gate slot
            // is released at the point HTTP/2 releases it, so a keep-alive client's next
            // request does not queue behind this one); the last write keeps the response's
            // write deadline.
            let last_write = x.poll_timeout().map(|d| data_plane.clock.deadline(d));
            // One reading of the clock for the body's end and the connection's release, as
            // `finish` would feed it.
            let at = data_plane.clock.now();
            drive::feed_at(x, Input::BodyEnd(end), at);
            effects::drain(data_plane, x, None);
            let sent_whole = pump.as_ref().is_none_or(Pump::is_sent);
            release_after(data_plane, last, end, reusable, sent_whole, at);
            let (written, waited) = if end == BodyEnd::Complete && !w.is_empty() {
                write_last(data_plane, &mut c.io, &w, last_write).await
            } else {
                (true, false)
            };
            // The connection's idle time counts from this reading unless the write waited.
            self.ended = (!waited).then_some(at);
            w.clear();
            c.out = w;
            end == BodyEnd::Complete && written
        };
        self.log_line(sent);
        complete && out.keep_alive
    }
}

/// `fut`'s output, and whether it waited (was not ready at its first poll).
async fn first_poll<F: Future>(fut: F) -> (F::Output, bool) {
    let mut fut = pin!(fut);
    let mut polls = 0u32;
    let out = std::future::poll_fn(|cx| {
        polls += 1;
        fut.as_mut().poll(cx)
    })
    .await;
    (out, polls > 1)
}

/// The delivered response's head for the client, written into `c.out` with weir's lines
/// (folded with `for_each`, not stepped through the chain one `next` at a time); `None` when
/// the head cannot be passed on.
fn write_head(
    x: &Bound,
    d: &Delivery,
    up: &Up,
    kept: &upstream_conn::Kept,
    (rctx, client): (ResponseContext, ClientSide),
    c: &mut DownstreamConn,
) -> Option<(weir_core::h1::ResponseOut, weir_core::h1::BodyFraming, bool)> {
    let mut extra = Extra::new(std::mem::take(&mut c.scratch));
    let rid = x.request_id().as_bytes();
    x.response_headers(Some(d), d.deliver.status)
        .for_each(|(name, value)| match name {
            header::BACKEND => extra.set_borrowed(name, up.target.id().as_bytes()),
            header::REQUEST_ID => extra.set_borrowed(name, rid),
            _ => extra.set(name, |out| push_text(out, &value)),
        });
    c.out.clear();
    let written = response_head(&up.conn, kept, rctx, client, &extra, &mut c.out);
    c.scratch = extra.into_scratch();
    written
}

/// After a delivered body's end: the upstream connection goes back to its pool when weir-core's
/// idle policy says it can be reused (whole response, whole request, nothing stray).
fn release_after(
    data_plane: &DataPlane,
    last: &mut Option<Up>,
    end: BodyEnd,
    reusable: bool,
    sent_whole: bool,
    at: weir_core::Instant,
) {
    let Some(up) = last.as_ref() else {
        return;
    };
    let ended = idle_pool::Ended {
        response_complete: end == BodyEnd::Complete,
        response_reusable: reusable,
        request_sent: sent_whole,
        stray_bytes: !up.conn.buf.is_empty(),
        send_proxy: up.target.send_proxy(),
    };
    if idle_pool::reusable_after(ended)
        && let Some(up) = last.take()
    {
        upstream_conn::release(&data_plane.upstream, up.conn, at);
    }
}

/// The response's last bytes to the client, within its write deadline when it has one:
/// whether they were all written, and whether the write had to wait.
async fn write_last(
    data_plane: &DataPlane,
    io: &mut Box<dyn crate::base::rt::Io>,
    w: &[u8],
    last_write: Option<std::time::Instant>,
) -> (bool, bool) {
    let write = write_all(io, w);
    match last_write {
        Some(deadline) => {
            let write = rt::timeout_at(data_plane.rt, deadline, write);
            let (r, waited) = first_poll(write).await;
            (matches!(r, Ok(Ok(()))), waited)
        }
        None => {
            let (r, waited) = first_poll(write).await;
            (r.is_ok(), waited)
        }
    }
}
