//! A small MCP server over stdio on one SQLite file (`DB_PATH`, default
//! `/data.db`), for pincer's tests of MCP servers in their own containers.
//! Built statically like the agent runner, so its image needs nothing else.
//!
//! Tools:
//! - `query_sql {sql}`: runs one statement and returns its rows as JSON
//!   (column names → values). The server opens the file read-write and does
//!   not refuse writes itself: a read-only volume is what must stop them.
//! - `list_tables`: the tables' names (the tests filter it out with
//!   `tools: [query_sql]`).

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::ErrorData;
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer, ServiceExt};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};
use serde_json::{Map, Value, json};

struct Db {
    path: String,
}

fn schema(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

fn text(text: String, is_error: bool) -> CallToolResult {
    if is_error {
        CallToolResult::error(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::success(vec![ContentBlock::text(text)])
    }
}

impl Db {
    fn open(&self) -> Result<Connection, String> {
        // Read-write, never create: what the volume allows decides.
        Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| format!("cannot open {}: {e}", self.path))
    }

    fn query(&self, sql: &str) -> Result<Value, String> {
        let db = self.open()?;
        let mut statement = db.prepare(sql).map_err(|e| e.to_string())?;
        let columns: Vec<String> = statement.column_names().map(str::to_owned).collect();
        let mut rows = statement.query([]).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(|e| e.to_string())? {
            let mut object = Map::new();
            for (i, column) in columns.iter().enumerate() {
                let value = match row.get_ref(i).map_err(|e| e.to_string())? {
                    ValueRef::Null => Value::Null,
                    ValueRef::Integer(n) => json!(n),
                    ValueRef::Real(f) => json!(f),
                    ValueRef::Text(t) => json!(String::from_utf8_lossy(t)),
                    ValueRef::Blob(b) => json!(format!("<{} bytes>", b.len())),
                };
                object.insert(column.clone(), value);
            }
            out.push(Value::Object(object));
        }
        Ok(Value::Array(out))
    }
}

impl ServerHandler for Db {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_server_info(
            Implementation::new("pincer-mcp-sqlite", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new(
                "query_sql",
                "Runs one SQL statement on the database and returns its rows as JSON.",
                schema(json!({
                    "type": "object",
                    "properties": {"sql": {"type": "string", "description": "one SQL statement"}},
                    "required": ["sql"],
                })),
            ),
            Tool::new(
                "list_tables",
                "Names of the database's tables.",
                schema(json!({"type": "object", "properties": {}})),
            ),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
        let result = match request.name.as_ref() {
            "query_sql" => match arguments.get("sql").and_then(Value::as_str) {
                Some(sql) => match self.query(sql) {
                    Ok(rows) => text(rows.to_string(), false),
                    Err(e) => text(format!("query failed: {e}"), true),
                },
                None => text("`sql` (a string) is required".to_owned(), true),
            },
            "list_tables" => {
                match self
                    .query("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
                {
                    Ok(rows) => text(rows.to_string(), false),
                    Err(e) => text(format!("query failed: {e}"), true),
                }
            }
            other => {
                return Err(ErrorData::invalid_params(
                    Cow::Owned(format!("no tool named `{other}`")),
                    None,
                ));
            }
        };
        Ok(CallToolResponse::from(result))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let path = std::env::var("DB_PATH").unwrap_or_else(|_| "/data.db".to_owned());
    let running = match (Db { path }).serve(rmcp::transport::stdio()).await {
        Ok(running) => running,
        Err(e) => {
            eprintln!("pincer-mcp-sqlite: handshake failed: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = running.waiting().await {
        eprintln!("pincer-mcp-sqlite: {e}");
        std::process::exit(1);
    }
}
