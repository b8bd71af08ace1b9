//! A blob store on a file system: `<root>/<first two hex digits>/<key>`.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use tokio::io::AsyncReadExt as _;

use super::valid_key;
use crate::codec::error::CodecError;

/// Blobs as files under `root`. A blob is written to a temporary name, synced
/// and renamed, so a reader never sees half a blob.
#[derive(Clone, Debug)]
pub struct DirStore {
    root: PathBuf,
}

impl DirStore {
    /// A store under `root`, which must be an existing directory.
    pub fn new(root: impl AsRef<Path>) -> Result<Self, CodecError> {
        let root = root.as_ref();
        if !root.is_dir() {
            return Err(CodecError::BlobConfig(format!(
                "blob directory {} does not exist or is not a directory",
                root.display()
            )));
        }
        Ok(Self {
            root: root.to_path_buf(),
        })
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, key: &str) -> Result<PathBuf, CodecError> {
        // Keys come from Redis, which anyone may write: only the shape this
        // build writes is turned into a path.
        if !valid_key(key) {
            return Err(CodecError::MalformedEnvelope("key is not a blob key"));
        }
        Ok(self.root.join(&key[..2]).join(key))
    }

    pub(super) async fn put(&self, key: &str, bytes: &[u8]) -> Result<(), CodecError> {
        let path = self.path(key)?;
        let dir = path.parent().unwrap_or(&self.root);
        tokio::fs::create_dir_all(dir).await.map_err(io)?;
        let tmp = dir.join(format!(".{key}.tmp"));
        let written = async {
            let mut f = tokio::fs::File::create(&tmp).await?;
            tokio::io::AsyncWriteExt::write_all(&mut f, bytes).await?;
            f.sync_all().await?;
            tokio::fs::rename(&tmp, &path).await
        }
        .await;
        if let Err(e) = written {
            let _ = tokio::fs::remove_file(&tmp).await;
            return Err(io(e));
        }
        Ok(())
    }

    pub(super) async fn get(&self, key: &str, limit: usize) -> Result<Vec<u8>, CodecError> {
        let path = self.path(key)?;
        let f = match tokio::fs::File::open(&path).await {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(CodecError::BlobMissing(key.to_owned()))
            }
            Err(e) => return Err(io(e)),
        };
        let mut out = Vec::new();
        f.take(limit as u64 + 1)
            .read_to_end(&mut out)
            .await
            .map_err(io)?;
        if out.len() > limit {
            return Err(CodecError::TooLarge { limit });
        }
        Ok(out)
    }

    pub(super) async fn delete(&self, key: &str) -> Result<(), CodecError> {
        match tokio::fs::remove_file(self.path(key)?).await {
            Err(e) if e.kind() != ErrorKind::NotFound => Err(io(e)),
            _ => Ok(()),
        }
    }
}

fn io(e: std::io::Error) -> CodecError {
    CodecError::BlobStore(format!("blob directory: {e}"))
}
