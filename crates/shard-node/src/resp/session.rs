//! What one RESP connection holds, and the connection commands that change it: `AUTH`,
//! `HELLO`, `CLIENT`, `SELECT`.
//!
//! Access is the HTTP API's (`[auth]`, docs/operations.md, "Access"): with client tokens configured, a
//! connection runs nothing but `AUTH`, `HELLO` and `QUIT` until it authenticates with one, and
//! then each command needs the right its HTTP route needs (reads `read`, increments and
//! `PFADD` `write`, `DEL`/`EXPIRE`/`PERSIST` `admin`). The token is checked by the same
//! [`Access`] the HTTP handlers use, once per `AUTH`; what it grants is kept.

use bytes::Bytes;
use geocount_http::{Access, Caller, Need};
use geocount_model::Right;
use geocount_resp::{ClientCommand, Hello, Protocol, Reply, words};
use hyper::Method;
use hyper::header::{AUTHORIZATION, HeaderMap, HeaderValue};

use super::about::REDIS_VERSION;

/// What a connection authenticated as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rights {
    /// No client tokens are configured: everything is allowed.
    Open,
    /// Tokens are configured and the connection has not authenticated.
    None,
    /// Authenticated with the token of this name, granting these rights.
    Token {
        /// The token's name.
        name: String,
        /// Whether it grants `read`, `write`, `admin`.
        grants: [bool; 3],
    },
}

/// One connection's state.
#[derive(Debug)]
pub(crate) struct Session {
    /// Its client id (`CLIENT ID`, `HELLO`).
    pub id: u64,
    /// Its protocol version.
    pub protocol: Protocol,
    /// Its name (`CLIENT SETNAME`).
    pub name: Option<Bytes>,
    /// What it may do.
    pub rights: Rights,
}

/// The index of `right` in [`Rights::Token`]'s grants.
fn index(right: Right) -> usize {
    match right {
        Right::Read => 0,
        Right::Write => 1,
        Right::Admin => 2,
    }
}

impl Session {
    /// A new connection with id `id`, authenticated already when `access` needs no token.
    pub fn new(id: u64, access: &Access) -> Self {
        Self {
            id,
            protocol: Protocol::Resp2,
            name: None,
            rights: if access.needs_tokens() {
                Rights::None
            } else {
                Rights::Open
            },
        }
    }

    /// Whether it may run a command at all: `NOAUTH` before `AUTH` when tokens are configured.
    pub fn authenticated(&self) -> Result<(), Reply> {
        match self.rights {
            Rights::None => Err(Reply::error(words::NOAUTH)),
            Rights::Open | Rights::Token { .. } => Ok(()),
        }
    }

    /// Whether it may run command `command`, which needs `right`: Redis's `NOPERM` otherwise.
    pub fn may(&self, right: Right, command: &str) -> Result<(), Reply> {
        match &self.rights {
            Rights::Open => Ok(()),
            Rights::None => Err(Reply::error(words::NOAUTH)),
            Rights::Token { grants, .. } if grants[index(right)] => Ok(()),
            Rights::Token { name, .. } => Err(Reply::error(format!(
                "NOPERM User {name} has no permissions to run the '{command}' command"
            ))),
        }
    }

    /// `AUTH [username] token`: the token must be a configured one; a user name, when given,
    /// must be `default` or the token's name.
    pub fn auth(&mut self, access: &Access, username: Option<&[u8]>, token: &[u8]) -> Reply {
        if !access.needs_tokens() {
            return Reply::error(words::NO_PASSWORD);
        }
        let mut bearer = b"Bearer ".to_vec();
        bearer.extend_from_slice(token);
        let Ok(value) = HeaderValue::from_bytes(&bearer) else {
            return Reply::error(words::WRONGPASS);
        };
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, value);
        let caller = Caller {
            headers: &headers,
            certified: None,
            method: &Method::POST,
            path: "AUTH",
        };
        let mut grants = [false; 3];
        let mut token_name = None;
        for right in [Right::Read, Right::Write, Right::Admin] {
            match access.check(&Need::Right(right), caller) {
                Ok(name) => {
                    grants[index(right)] = true;
                    token_name = name.map(str::to_owned).or(token_name);
                }
                Err(geocount_http::AccessError::Forbidden { name, .. }) => {
                    token_name = Some(name);
                }
                Err(_) => return Reply::error(words::WRONGPASS),
            }
        }
        let name = token_name.unwrap_or_default();
        if let Some(user) = username
            && user != b"default"
            && user != name.as_bytes()
        {
            return Reply::error(words::WRONGPASS);
        }
        self.rights = Rights::Token { name, grants };
        Reply::OK
    }

    /// `HELLO [version [AUTH user token] [SETNAME name]]`: authenticates, names and switches
    /// the protocol version (in that order, each only if the one before succeeded), then
    /// replies what Redis replies, in the new version.
    pub fn hello(&mut self, access: &Access, hello: Hello) -> Reply {
        if let Some((user, token)) = &hello.auth {
            let authenticated = self.auth(access, Some(user), token);
            if authenticated.is_error() {
                return authenticated;
            }
        } else if self.rights == Rights::None {
            return Reply::error(
                "NOAUTH HELLO must be called with the client already authenticated, otherwise \
                 the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the \
                 client and select the RESP protocol version at the same time",
            );
        }
        if let Some(name) = hello.setname {
            let named = self.client(ClientCommand::SetName(name));
            if named.is_error() {
                return named;
            }
        }
        match hello.version {
            Some(3) => self.protocol = Protocol::Resp3,
            Some(2) => self.protocol = Protocol::Resp2,
            _ => {}
        }
        let word = Reply::word;
        Reply::Map(vec![
            (word("server"), word("geocount")),
            (word("version"), word(REDIS_VERSION)),
            (word("proto"), Reply::Integer(self.protocol.number())),
            (word("id"), Reply::Integer(self.id as i64)),
            (word("mode"), word("standalone")),
            (word("role"), word("master")),
            (word("modules"), Reply::Array(Vec::new())),
        ])
    }

    /// `CLIENT SETNAME`, `GETNAME`, `ID`, `SETINFO`.
    pub fn client(&mut self, command: ClientCommand) -> Reply {
        match command {
            ClientCommand::SetName(name) => {
                self.name = (!name.is_empty()).then_some(name);
                Reply::OK
            }
            ClientCommand::GetName => self.name.clone().map_or(Reply::Nil, Reply::Bulk),
            ClientCommand::Id => Reply::Integer(self.id as i64),
            ClientCommand::SetInfo => Reply::OK,
        }
    }

    /// `SELECT index`: geocount has database 0 only.
    pub fn select(index: i64) -> Reply {
        if index == 0 {
            Reply::OK
        } else {
            Reply::error("ERR DB index is out of range")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use geocount_model::{AuthConfig, Secret, TokenConfig};

    const READER: &str = "reader-0123456789abcdef0123456789abcdef";
    const ADMIN: &str = "admin-0123456789abcdef0123456789abcdef";

    fn access() -> Access {
        let token = |name: &str, token: &str, rights: &[Right]| TokenConfig {
            name: name.into(),
            token: Secret::new(token),
            rights: rights.to_vec(),
        };
        let config = AuthConfig {
            tokens: vec![
                token("dashboard", READER, &[Right::Read]),
                token("ops", ADMIN, &[Right::Admin]),
            ],
            ..AuthConfig::default()
        };
        Access::new(&config, "DC_A_VAL_0", false)
    }

    #[test]
    fn tokens_grant_over_resp_what_they_grant_over_http() {
        let access = access();
        let mut session = Session::new(1, &access);
        assert_eq!(session.authenticated(), Err(Reply::error(words::NOAUTH)));
        assert_eq!(
            session.auth(&access, None, b"nope"),
            Reply::error(words::WRONGPASS)
        );
        assert_eq!(
            session.auth(&access, None, b"bad\r\ntoken"),
            Reply::error(words::WRONGPASS)
        );
        assert_eq!(session.auth(&access, None, READER.as_bytes()), Reply::OK);
        assert_eq!(session.may(Right::Read, "get"), Ok(()));
        assert_eq!(
            session.may(Right::Write, "incr"),
            Err(Reply::error(
                "NOPERM User dashboard has no permissions to run the 'incr' command"
            ))
        );
        assert_eq!(
            session.auth(&access, Some(b"someone"), ADMIN.as_bytes()),
            Reply::error(words::WRONGPASS)
        );
        assert_eq!(
            session.auth(&access, Some(b"ops"), ADMIN.as_bytes()),
            Reply::OK
        );
        for right in [Right::Read, Right::Write, Right::Admin] {
            assert_eq!(session.may(right, "del"), Ok(()));
        }
        let open = Access::default();
        let mut session = Session::new(2, &open);
        assert_eq!(session.may(Right::Admin, "del"), Ok(()));
        assert_eq!(
            session.auth(&open, None, b"x"),
            Reply::error(words::NO_PASSWORD)
        );
    }

    #[test]
    fn hello_authenticates_names_and_switches_the_protocol() {
        let access = access();
        let mut session = Session::new(7, &access);
        let refused = session.hello(
            &access,
            Hello {
                version: Some(3),
                ..Hello::default()
            },
        );
        assert!(refused.is_error());
        assert_eq!(session.protocol, Protocol::Resp2);
        let hello = Hello {
            version: Some(3),
            auth: Some((Bytes::from("default"), Bytes::from(READER))),
            setname: Some(Bytes::from("me")),
        };
        let Reply::Map(pairs) = session.hello(&access, hello) else {
            panic!("a map");
        };
        assert_eq!(pairs[2], (Reply::word("proto"), Reply::Integer(3)));
        assert_eq!(pairs[3], (Reply::word("id"), Reply::Integer(7)));
        assert_eq!(session.protocol, Protocol::Resp3);
        assert_eq!(
            session.client(ClientCommand::GetName),
            Reply::Bulk(Bytes::from("me"))
        );
        assert_eq!(
            Session::select(1),
            Reply::error("ERR DB index is out of range")
        );
    }
}
