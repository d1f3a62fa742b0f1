//! A TCP proxy a test controls ([`Proxy`]): put between a client and an apiserver, it forwards
//! bytes both ways until it is [blocked](Proxy::block), and then holds them — connections stay
//! open, requests hang, nothing is lost — until it is [unblocked](Proxy::unblock), when
//! everything held goes through, late. A network partition, as a client meets it.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::Error;

/// A running proxy; stopped (every connection closed) when dropped.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    blocked: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards each connection to `target`.
    pub async fn start(target: SocketAddr) -> Result<Self, Error> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| Error::Io("bind the proxy".into(), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::Io("the proxy's address".into(), e))?;
        let blocked = watch::Sender::new(false);
        let rx = blocked.subscribe();
        let task = tokio::spawn(async move {
            let mut pumps = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(target).await else {
                    continue;
                };
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                pumps.spawn(pump(client_read, server_write, rx.clone()));
                pumps.spawn(pump(server_read, client_write, rx.clone()));
            }
        });
        Ok(Self {
            addr,
            blocked,
            task,
        })
    }

    /// Where clients connect: `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// An `https://` URL of the proxy, for a kubeconfig's `server`.
    pub fn https_url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Holds every byte from now on, both ways, until [`Proxy::unblock`].
    pub fn block(&self) {
        self.blocked.send_replace(true);
    }

    /// Lets everything through again, what was held first.
    pub fn unblock(&self) {
        self.blocked.send_replace(false);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies `from` to `to`, never while blocked: a chunk read while blocked waits to be sent.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut blocked: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if blocked.wait_for(|b| !*b).await.is_err() {
            return;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if blocked.wait_for(|b| !*b).await.is_err() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn bytes_pass_until_blocked_and_arrive_late_once_unblocked() {
        let echo = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let target = echo.local_addr().expect("addr");
        tokio::spawn(async move {
            let (mut s, _) = echo.accept().await.expect("accept");
            let mut buf = [0u8; 16];
            loop {
                let n = s.read(&mut buf).await.expect("read");
                if n == 0 {
                    return;
                }
                s.write_all(&buf[..n]).await.expect("write");
            }
        });
        let proxy = Proxy::start(target).await.expect("proxy");
        let mut c = TcpStream::connect(proxy.addr()).await.expect("connect");
        let mut buf = [0u8; 3];
        c.write_all(b"one").await.expect("write");
        c.read_exact(&mut buf).await.expect("echo");
        assert_eq!(&buf, b"one");
        proxy.block();
        c.write_all(b"two").await.expect("write");
        let held = tokio::time::timeout(Duration::from_millis(300), c.read_exact(&mut buf)).await;
        assert!(held.is_err(), "passed while blocked");
        proxy.unblock();
        c.read_exact(&mut buf).await.expect("late echo");
        assert_eq!(&buf, b"two");
    }
}
