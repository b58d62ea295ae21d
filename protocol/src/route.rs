//! The words an HTTP route is declared in: its [`Verb`], the query parameters it reads
//! ([`QueryParam`], each of a [`ParamKind`]) and the prefix every route lives under
//! ([`API_PREFIX`]). A leaf: the method declarations (`crate::rpc`) use these words to give a
//! method its route, and `crate::http` says how the API answers.

/// Where the API's routes live; a route's path is relative to it.
pub const API_PREFIX: &str = "/api/v1";

/// The HTTP verb of a route: `GET` reads, `POST` acts (and takes a body where the route says so).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    /// Reads; never changes anything.
    Get,
    /// Submits, cancels, resumes, sends a follow-up, verifies.
    Post,
}

impl Verb {
    /// The verb as HTTP spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "GET",
            Verb::Post => "POST",
        }
    }
}

/// What a query parameter's text is read as before it joins the params: an integer parameter must
/// be digits (`?after_seq=12`), anything else is taken as a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParamKind {
    /// Taken as it is.
    String,
    /// A non-negative integer; other text is refused with -32602 naming the parameter.
    Integer,
    /// `true` or `false`; other text is refused with -32602 naming the parameter.
    Boolean,
}

/// A query parameter a route reads into its method's params (others are ignored, as unknown params
/// are on the socket).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QueryParam {
    /// The name in the query string and in the method's params.
    pub name: &'static str,
    /// How its text is read.
    pub kind: ParamKind,
}

/// A query parameter taken as text.
pub const fn text(name: &'static str) -> QueryParam {
    QueryParam { name, kind: ParamKind::String }
}

/// A query parameter read as a non-negative integer.
pub const fn integer(name: &'static str) -> QueryParam {
    QueryParam { name, kind: ParamKind::Integer }
}

/// A query parameter read as `true` or `false`.
pub const fn boolean(name: &'static str) -> QueryParam {
    QueryParam { name, kind: ParamKind::Boolean }
}
