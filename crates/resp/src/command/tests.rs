use super::*;

fn args(words: &[&str]) -> Args {
    words.iter().collect()
}

fn parsed(words: &[&str]) -> Result<RespCommand, String> {
    parse(&args(words)).map_err(|e| e.to_string())
}

#[test]
fn the_incr_family_adds_signed_deltas() {
    let incr = |key: &str, delta| {
        Ok(RespCommand::IncrBy {
            key: Bytes::copy_from_slice(key.as_bytes()),
            delta,
        })
    };
    assert_eq!(parsed(&["incr", "a"]), incr("a", 1));
    assert_eq!(parsed(&["DeCr", "a"]), incr("a", -1));
    assert_eq!(parsed(&["INCRBY", "a", "-7"]), incr("a", -7));
    assert_eq!(parsed(&["INCRBY", "a", "0"]), incr("a", 0));
    assert_eq!(
        parsed(&["DECRBY", "a", "9223372036854775807"]),
        incr("a", -i64::MAX)
    );
    assert_eq!(
        parsed(&["INCRBY", "a", "-9223372036854775808"]),
        incr("a", i64::MIN)
    );
    assert_eq!(
        parsed(&["DECRBY", "a", "-9223372036854775808"]),
        Err("ERR decrement would overflow".into())
    );
}

#[test]
fn integers_are_read_as_redis_reads_them() {
    for good in [
        "0",
        "1",
        "-1",
        "9223372036854775807",
        "-9223372036854775808",
    ] {
        assert!(integer(good.as_bytes()).is_ok(), "{good}");
    }
    for bad in [
        "",
        "-",
        "+1",
        " 1",
        "1 ",
        "01",
        "-0",
        "00",
        "1.0",
        "1e3",
        "0x10",
        "9223372036854775808",
        "-9223372036854775809",
        "١",
    ] {
        assert_eq!(
            integer(bad.as_bytes()),
            Err(CommandError::NotInteger),
            "{bad:?}"
        );
    }
    assert_eq!(
        parsed(&["incrby", "a", "1.5"]),
        Err("ERR value is not an integer or out of range".into())
    );
}

#[test]
fn arity_and_unknown_commands_are_refused_in_redis_words() {
    assert_eq!(
        parsed(&["INCR"]),
        Err("ERR wrong number of arguments for 'incr' command".into())
    );
    assert_eq!(
        parsed(&["get", "a", "b"]),
        Err("ERR wrong number of arguments for 'get' command".into())
    );
    assert_eq!(
        parsed(&["ping", "a", "b"]),
        Err("ERR wrong number of arguments for 'ping' command".into())
    );
    assert_eq!(
        parsed(&["SET", "k", "v"]),
        Err("ERR unknown command 'SET', with args beginning with: 'k' 'v' ".into())
    );
    assert_eq!(
        parsed(&["flushall"]),
        Err("ERR unknown command 'flushall', with args beginning with: ".into())
    );
    let long = "x".repeat(300);
    let refused = parsed(&["nope", &long, "y"]).unwrap_err();
    assert!(refused.len() < 300, "{refused}");
    assert_eq!(
        parsed(&["client", "kill"]),
        Err("ERR unknown subcommand 'kill'. Try CLIENT HELP.".into())
    );
    assert_eq!(
        parsed(&["client", "getname", "x"]),
        Err("ERR wrong number of arguments for 'client|getname' command".into())
    );
    assert_eq!(
        parsed(&["config", "set", "save", ""]),
        Err("ERR unknown subcommand 'set'. Try CONFIG HELP.".into())
    );
    assert_eq!(
        parsed(&["config", "get"]),
        Err("ERR wrong number of arguments for 'config|get' command".into())
    );
    assert_eq!(
        parsed(&["auth", "a", "b", "c"]),
        Err("ERR syntax error".into())
    );
}

#[test]
fn connection_commands_take_their_options() {
    assert_eq!(parsed(&["HELLO"]), Ok(RespCommand::Hello(Hello::default())));
    let hello = parsed(&["hello", "3", "AUTH", "default", "t0k", "setname", "me"]).unwrap();
    assert_eq!(
        hello,
        RespCommand::Hello(Hello {
            version: Some(3),
            auth: Some((Bytes::from("default"), Bytes::from("t0k"))),
            setname: Some(Bytes::from("me")),
        })
    );
    assert_eq!(
        parsed(&["hello", "4"]),
        Err("NOPROTO unsupported protocol version".into())
    );
    assert_eq!(
        parsed(&["hello", "three"]),
        Err("ERR Protocol version is not an integer or out of range".into())
    );
    assert_eq!(
        parsed(&["hello", "3", "auth", "u"]),
        Err("ERR Syntax error in HELLO option 'auth'".into())
    );
    assert_eq!(parsed(&["select", "0"]), Ok(RespCommand::Select(0)));
    assert_eq!(
        parsed(&["client", "setname", "a b"]),
        Err("ERR Client names cannot contain spaces, newlines or special characters.".into())
    );
    assert_eq!(
        parsed(&["CLIENT", "SETINFO", "lib-name", "redis-py"]),
        Ok(RespCommand::Client(ClientCommand::SetInfo))
    );
    assert_eq!(
        parsed(&["config", "GET", "Save", "appendonly"]),
        Ok(RespCommand::ConfigGet(vec![
            "save".into(),
            "appendonly".into()
        ]))
    );
    let longest = "*".repeat(crate::glob::MAX_PATTERN_BYTES);
    assert!(parsed(&["config", "get", "save", &longest]).is_ok());
    let long = format!("{longest}x");
    assert_eq!(
        parsed(&["config", "get", "save", &long]),
        Err("ERR pattern too long: a CONFIG GET pattern of 257 bytes (at most 256)".into())
    );
    assert_eq!(
        parsed(&["command", "docs"]),
        Ok(RespCommand::Command(CommandQuery::Docs))
    );
    assert_eq!(parsed(&["info"]), Ok(RespCommand::Info(Vec::new())));
}

#[test]
fn expiries_are_milliseconds_from_now() {
    let expire = |millis, command| {
        Ok(RespCommand::Expire {
            key: Bytes::from("k"),
            millis,
            command,
        })
    };
    assert_eq!(parsed(&["expire", "k", "10"]), expire(10_000, "expire"));
    assert_eq!(parsed(&["PEXPIRE", "k", "-5"]), expire(-5, "pexpire"));
    assert_eq!(
        parsed(&["expire", "k", "9223372036854775807"]),
        Err("ERR invalid expire time in 'expire' command".into())
    );
    assert_eq!(
        parsed(&["expire", "k", "10", "NX"]),
        Err("ERR Unsupported option NX".into())
    );
    assert_eq!(
        parsed(&["pttl", "k"]),
        Ok(RespCommand::Ttl {
            key: Bytes::from("k"),
            millis: true
        })
    );
}

#[test]
fn every_command_in_the_table_parses() {
    for spec in COMMANDS {
        let count = usize::try_from(spec.arity.unsigned_abs()).unwrap();
        let mut words = vec![spec.name];
        words.extend(std::iter::repeat_n("1", count - 1));
        if spec.name == "client" {
            words = vec!["client", "id"];
        }
        if spec.name == "config" {
            words = vec!["config", "get", "save"];
        }
        if spec.name == "hello" {
            words = vec!["hello", "2"];
        }
        assert!(parsed(&words).is_ok(), "{words:?}: {:?}", parsed(&words));
    }
}
