//! Kubernetes' IP and CIDR libraries.

#[allow(clippy::wildcard_imports)]
use super::*;

/// An IP address (Kubernetes' `ip` library).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ip(IpAddr);

impl Opaque for Ip {
    fn runtime_type_name(&self) -> &str {
        "net.IP"
    }
}

/// A CIDR (Kubernetes' `cidr` library): the address as written and the
/// prefix length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Opaque for Cidr {
    fn runtime_type_name(&self) -> &str {
        "net.CIDR"
    }
}

pub(super) fn parse_ip(t: &str) -> Option<IpAddr> {
    if t.contains('%') {
        return None;
    }
    let ip: IpAddr = t.parse().ok()?;
    // IPv4-mapped IPv6 addresses are rejected.
    if let IpAddr::V6(v6) = ip
        && v6.to_ipv4_mapped().is_some()
    {
        return None;
    }
    Some(ip)
}

pub(super) fn parse_cidr(t: &str) -> Option<Cidr> {
    let (a, p) = t.split_once('/')?;
    let addr = parse_ip(a)?;
    if p.is_empty() || (p.len() > 1 && p.starts_with('0')) {
        return None;
    }
    let prefix: u8 = p.parse().ok()?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    (prefix <= max).then_some(Cidr { addr, prefix })
}

pub(super) fn bits(ip: &IpAddr) -> (u128, u8) {
    match ip {
        IpAddr::V4(v4) => (u32::from(*v4) as u128, 32),
        IpAddr::V6(v6) => (u128::from(*v6), 128),
    }
}

pub(super) fn mask(value: u128, width: u8, prefix: u8) -> u128 {
    if prefix == 0 {
        return 0;
    }
    let keep = u128::MAX << (128 - prefix as u32);
    let shifted = value << (128 - width as u32);
    (shifted & keep) >> (128 - width as u32)
}

impl Cidr {
    fn contains(&self, ip: &IpAddr) -> bool {
        let (a, w) = bits(&self.addr);
        let (b, w2) = bits(ip);
        w == w2 && mask(a, w, self.prefix) == mask(b, w, self.prefix)
    }

    fn network(&self) -> IpAddr {
        let (a, w) = bits(&self.addr);
        let m = mask(a, w, self.prefix);
        match self.addr {
            IpAddr::V4(_) => IpAddr::V4((m as u32).into()),
            IpAddr::V6(_) => IpAddr::V6(m.into()),
        }
    }
}

overload!(ip_new, |args| {
    let t = str_arg(args, 0, "ip")?;
    parse_ip(t).map(|ip| opaque(Ip(ip))).ok_or_else(|| {
        ferr(
            "ip",
            format!("IP Address '{t}' parse error during conversion from string"),
        )
    })
});
overload!(ip_is, |args| Ok(Value::Bool(
    parse_ip(str_arg(args, 0, "isIP")?).is_some()
)));
overload!(ip_is_canonical, |args| {
    let t = str_arg(args, 0, "ip.isCanonical")?;
    let ip = parse_ip(t).ok_or_else(|| ferr("ip.isCanonical", "invalid IP"))?;
    Ok(Value::Bool(ip.to_string() == t))
});

pub(super) fn this_ip(args: &[Value], function: &str) -> Result<IpAddr, ExecutionError> {
    as_opaque::<Ip>(arg(args, 0, function)?)
        .map(|i| i.0)
        .ok_or_else(|| ferr(function, "not an IP"))
}

overload!(ip_family, |args| Ok(Value::Int(
    if this_ip(args, "family")?.is_ipv4() {
        4
    } else {
        6
    }
)));
overload!(ip_is_unspecified, |args| Ok(Value::Bool(
    this_ip(args, "isUnspecified")?.is_unspecified()
)));
overload!(ip_is_loopback, |args| Ok(Value::Bool(
    this_ip(args, "isLoopback")?.is_loopback()
)));
overload!(ip_is_ll_multicast, |args| Ok(Value::Bool(
    match this_ip(args, "isLinkLocalMulticast")? {
        IpAddr::V4(v4) => v4.octets()[..3] == [224, 0, 0],
        IpAddr::V6(v6) => v6.segments()[0] & 0xff0f == 0xff02,
    }
)));
pub(super) fn is_ll_unicast(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.octets()[..2] == [169, 254],
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
    }
}
overload!(ip_is_ll_unicast, |args| Ok(Value::Bool(is_ll_unicast(
    &this_ip(args, "isLinkLocalUnicast")?
))));
overload!(ip_is_global_unicast, |args| {
    let ip = this_ip(args, "isGlobalUnicast")?;
    let broadcast = matches!(ip, IpAddr::V4(v4) if v4.is_broadcast());
    Ok(Value::Bool(
        !ip.is_unspecified()
            && !ip.is_loopback()
            && !ip.is_multicast()
            && !is_ll_unicast(&ip)
            && !broadcast,
    ))
});

overload!(cidr_new, |args| {
    let t = str_arg(args, 0, "cidr")?;
    parse_cidr(t).map(opaque).ok_or_else(|| {
        ferr(
            "cidr",
            format!("network address '{t}' parse error during conversion from string"),
        )
    })
});
overload!(cidr_is, |args| Ok(Value::Bool(
    parse_cidr(str_arg(args, 0, "isCIDR")?).is_some()
)));

pub(super) fn this_cidr<'a>(args: &'a [Value], function: &str) -> Result<&'a Cidr, ExecutionError> {
    as_opaque::<Cidr>(arg(args, 0, function)?).ok_or_else(|| ferr(function, "not a CIDR"))
}

overload!(cidr_contains_ip, |args| {
    let c = this_cidr(args, "containsIP")?;
    let ip = match arg(args, 1, "containsIP")? {
        Value::String(t) => parse_ip(t).ok_or_else(|| ferr("containsIP", "invalid IP"))?,
        other => as_opaque::<Ip>(other)
            .map(|i| i.0)
            .ok_or_else(|| ferr("containsIP", "expected an IP"))?,
    };
    Ok(Value::Bool(c.contains(&ip)))
});
overload!(cidr_contains_cidr, |args| {
    let c = this_cidr(args, "containsCIDR")?;
    let other = match arg(args, 1, "containsCIDR")? {
        Value::String(t) => parse_cidr(t).ok_or_else(|| ferr("containsCIDR", "invalid CIDR"))?,
        other => as_opaque::<Cidr>(other)
            .cloned()
            .ok_or_else(|| ferr("containsCIDR", "expected a CIDR"))?,
    };
    Ok(Value::Bool(
        other.prefix >= c.prefix && c.contains(&other.addr),
    ))
});
overload!(cidr_ip, |args| {
    if let Some(c) = as_opaque::<Cidr>(arg(args, 0, "ip")?) {
        return Ok(opaque(Ip(c.addr)));
    }
    Err(ferr("ip", "not a CIDR"))
});
overload!(cidr_masked, |args| {
    let c = this_cidr(args, "masked")?;
    Ok(opaque(Cidr {
        addr: c.network(),
        prefix: c.prefix,
    }))
});
overload!(cidr_prefix_length, |args| Ok(Value::Int(
    this_cidr(args, "prefixLength")?.prefix as i64
)));
